r"""Whether a comparison's verdicts on a dataset hold on a variant of it
(``table.variants``, dataset -> variant: e.g. Chameleon -> its version
without duplicate nodes). Per compared row and variant, the verdicts on
both graphs side by side and how many of the dataset's verdicts (beats or
loses) the variant gives again, in words; the README quotes it."""
from typing import Dict, List, Tuple

from gnorm.study.findings.compare import (KINDS, NOT_COMPARED, NOT_RUN,
                                          SPLITS_DIFFER, STRONG, UNCOMMITTED,
                                          Comparison, Pair, verdict_or_reason)
from gnorm.study.words.verdicts import cells_text, said_of

# How a comparison without a verdict reads.
NO_VERDICT = {NOT_RUN: 'is not run here', NOT_COMPARED: 'is not compared '
              'yet (incomplete)', SPLITS_DIFFER: 'is not compared (the '
              'splits differ)', UNCOMMITTED: 'is not quoted (runs of '
              'uncommitted code)'}
# The order verdicts are named in.
ORDER = (*KINDS, NOT_COMPARED, SPLITS_DIFFER, UNCOMMITTED, NOT_RUN)


def on_graph(verdicts: Dict[int, str], dataset: str, other: str) -> str:
    r"""``beats at L=2/4, is not distinguishable at L=8`` of the
    :obj:`verdicts` by depth of one dataset."""
    by: Dict[str, List[int]] = {}
    for depth, verdict in verdicts.items():
        by.setdefault(verdict, []).append(depth)
    parts = [f"{said_of(v, other) if v in KINDS else NO_VERDICT[v]} at "
             f"{cells_text([(dataset, d) for d in by[v]]).split(' ', 1)[1]}"
             for v in ORDER if v in by]
    return ', '.join(parts)


def held(original: Dict[int, str], variant: Dict[int, str]) -> List[int]:
    r"""The depths where the original's verdict (beats or loses) is the
    variant's too."""
    return [d for d, v in original.items()
            if v in STRONG and variant.get(d) == v]


def pair_words(row: str, other: str, found: Dict[Pair, Comparison],
               original: str, variant: str) -> str:
    r"""One comparison (:obj:`row` against :obj:`other`) on
    :obj:`original` and :obj:`variant`, in words."""
    depths = sorted({k[3] for k in found if k[2] == other
                     and k[0] in (original, variant)})
    verdicts = {d: {depth: verdict_or_reason(found.get((d, row, other, depth)))
                    for depth in depths} for d in (original, variant)}
    strong = [d for d, v in verdicts[original].items()
              if v in STRONG]
    kept = held(verdicts[original], verdicts[variant])
    words = (f'against {other}, {row} '
             f'{on_graph(verdicts[original], original, other)} on '
             f'{original} and {on_graph(verdicts[variant], variant, other)} '
             f'on {variant}')
    if not strong:
        return words + f' (no verdict on {original} to keep)'
    return words + (f': {len(kept)} of its {len(strong)} verdict'
                    f"{'s' if len(strong) > 1 else ''} on {original} "
                    f"hold{'s' if len(kept) == 1 else ''} on {variant}")


def _listed(row: str, cells: List[Tuple[str, str, str, int]]) -> str:
    r"""``beats layernorm at chameleon L=8, squirrel L=4/8``: the verdicts
    :obj:`cells` (verdict, other, dataset, depth) of :obj:`row`."""
    by: Dict[Tuple[str, str], List[Tuple[str, int]]] = {}
    for verdict, other, dataset, depth in cells:
        by.setdefault((verdict, other), []).append((dataset, depth))
    return '; '.join(f'{said_of(v, other, named=True)} at '
                     f'{cells_text(found)}'
                     for (v, other), found in by.items())


def variant_summary(row: str, found: Dict[Pair, Comparison],
                    variants: Dict[str, str], how: str = '') -> str:
    r"""One sentence: how many of :obj:`row`'s verdicts (beats or loses)
    on the datasets of :obj:`variants` hold on their variants (and how
    many are not compared there yet), and the verdicts only the variants
    give; cells whose runs (on the dataset or its variant) include runs of
    uncommitted code are named, not quoted; :obj:`how`: how the verdicts
    were read."""
    kept, lost, pending, new, unquoted = [], [], [], [], []
    for original, variant in variants.items():
        for (dataset, r, other, depth), f in found.items():
            if r != row or dataset != original or f.verdict not in STRONG:
                continue
            said = verdict_or_reason(f)
            there = verdict_or_reason(found.get((variant, row, other, depth)))
            if UNCOMMITTED in (said, there):
                unquoted.append((dataset, depth))
                continue
            (kept if there == said else pending
             if there in NO_VERDICT else lost).append(
                (said, other, dataset, depth))
        for (dataset, r, other, depth), f in found.items():
            said = verdict_or_reason(f)
            if r == row and dataset == variant and said in STRONG and \
                    verdict_or_reason(found.get(
                        (original, row, other, depth))) not in (
                            said, UNCOMMITTED):
                new.append((said, other, dataset, depth))
    originals, variant_names = ', '.join(variants), ', '.join(
        variants.values())
    verdicts = kept + lost + pending
    text = (f"{row} has {len(verdicts)} verdict"
            f"{'s' if len(verdicts) != 1 else ''} on {originals}"
            + (f' ({_listed(row, verdicts)})' if verdicts else '')
            + f"; {len(kept)} hold{'s' if len(kept) == 1 else ''} on "
            f"{variant_names}" + (f' ({_listed(row, kept)})' if kept else ''))
    if pending:
        text += (f"; {len(pending)} not compared there yet "
                 f"({_listed(row, pending)})")
    if unquoted:
        text += (f"; not quoted, runs of uncommitted code on a dataset or "
                 f"its variant: {cells_text(unquoted)}")
    text += (f"; on {variant_names} it has {len(new)} verdict"
             f"{'s' if len(new) != 1 else ''} the originals lack"
             + (f' ({_listed(row, new)})' if new else ''))
    return f"Kept on the variants{f' ({how})' if how else ''}: {text}."


def variant_words(row: str, found: Dict[Pair, Comparison],
                  variants: Dict[str, str], how: str = '') -> str:
    r"""The paragraph of :obj:`row`'s comparisons in :obj:`found` on each
    dataset and its variant (:obj:`variants`), depth by depth;
    :obj:`how`: how the verdicts were read (e.g. ``Holm-adjusted over a
    family of 24``)."""
    others = list(dict.fromkeys(k[2] for k in found if k[1] == row))
    parts = [pair_words(row, other, found, original, variant)
             for original, variant in variants.items() for other in others]
    return (f"On the variants{f' ({how})' if how else ''}: "
            + '; '.join(parts) + '.')
