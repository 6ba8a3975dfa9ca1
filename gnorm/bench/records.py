r"""Measurements as JSON lines, one object a line, appended as each is
made: an interrupted sweep loses nothing finished and resumes where it
stopped, and a report is a pure function of the file."""
import json
from pathlib import Path
from typing import Any, Callable, Dict, Hashable, Iterable, Iterator, List

Row = Dict[str, Any]


def read_jsonl(path: Any) -> List[Row]:
    r"""The objects of the JSON-lines file :obj:`path` in order (blank
    lines skipped); empty where there is no file."""
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()
            if line.strip()]


def write_jsonl(path: Any, rows: Iterable[Row]) -> None:
    r"""Writes :obj:`rows` to :obj:`path`, one JSON object a line."""
    Path(path).write_text(''.join(json.dumps(r) + '\n' for r in rows))


class Records:
    r"""The measurements of the JSON-lines file :obj:`path` by
    ``key(row)``, the last line of a key winning: ``key in records`` says
    whether a sweep has measured it already, :meth:`add` appends a new one
    to the file at once. :obj:`resume`: :obj:`False` starts the file
    empty (a sweep that measures everything again)."""

    def __init__(self, path: Any,
                 key: Callable[[Row], Hashable] = lambda row: row['key'],
                 resume: bool = True):
        self.path, self.key = Path(path), key
        self.rows: Dict[Hashable, Row] = {}
        if resume:
            for row in read_jsonl(self.path):
                self.rows[key(row)] = row
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text('')

    def __contains__(self, key: Hashable) -> bool:
        return key in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows.values())

    def get(self, key: Hashable, default: Any = None) -> Any:
        return self.rows.get(key, default)

    def add(self, row: Row) -> Row:
        r"""Appends :obj:`row` to the file and keeps it under its key."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open('a') as f:
            f.write(json.dumps(row, default=str) + '\n')
        self.rows[self.key(row)] = row
        return row
