r"""The graphs of Platonov et al. ("A critical look at the evaluation of
GNNs under heterophily: are we really making progress?", ICLR 2023) as PyG
datasets: :class:`HeterophilousGraphs`."""
import os.path as osp
from typing import Callable, Optional

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset, download_url
from torch_geometric.utils import to_undirected


class HeterophilousGraphs(InMemoryDataset):
    r"""A graph of the `"A Critical Look at the Evaluation of GNNs under
    Heterophily: Are We Really Making Progress?"
    <https://arxiv.org/abs/2302.11640>`_ paper, read from the paper
    repository's ``data/<name>.npz``: the filtered Wikipedia graphs
    :obj:`"chameleon_filtered"` and :obj:`"squirrel_filtered"` (Chameleon
    and Squirrel with their duplicate nodes removed) and the new graphs
    :obj:`"minesweeper"` and :obj:`"tolokers"` (any other file of the
    repository's layout loads too).

    The processing is that of
    :class:`torch_geometric.datasets.HeterophilousGraphDataset` (which
    lacks the filtered graphs): the stored edges, one row per node pair,
    are made undirected (both directions, duplicates dropped:
    :func:`torch_geometric.utils.to_undirected`), and the ten splits of
    the paper are the columns of the masks :obj:`[num_nodes, 10]`. The raw
    file lives in ``<root>/<name>/raw/<name>.npz``, the layout of
    :class:`~torch_geometric.datasets.HeterophilousGraphDataset`.

    Args:
        root (str): Root directory where the dataset should be saved.
        name (str): The name of the graph (:obj:`"chameleon_filtered"`,
            :obj:`"squirrel_filtered"`, :obj:`"minesweeper"`,
            :obj:`"tolokers"`), also written with a hyphen and capitals
            (:obj:`"Minesweeper"`).
        transform (callable, optional): A function/transform that takes in
            an :obj:`torch_geometric.data.Data` object and returns a
            transformed version, at every access. (default: :obj:`None`)
        pre_transform (callable, optional): As :obj:`transform`, once,
            before the graph is saved to disk. (default: :obj:`None`)
        force_reload (bool, optional): Whether to re-process the dataset.
            (default: :obj:`False`)
    """
    url = ('https://github.com/yandex-research/heterophilous-graphs/raw/'
           'main/data')

    def __init__(self, root: str, name: str,
                 transform: Optional[Callable] = None,
                 pre_transform: Optional[Callable] = None,
                 force_reload: bool = False) -> None:
        self.name = name.lower().replace('-', '_')
        super().__init__(root, transform, pre_transform,
                         force_reload=force_reload)
        self.load(self.processed_paths[0])

    @property
    def raw_dir(self) -> str:
        return osp.join(self.root, self.name, 'raw')

    @property
    def processed_dir(self) -> str:
        return osp.join(self.root, self.name, 'processed')

    @property
    def raw_file_names(self) -> str:
        return f'{self.name}.npz'

    @property
    def processed_file_names(self) -> str:
        return 'data.pt'

    def download(self) -> None:
        download_url(f'{self.url}/{self.name}.npz', self.raw_dir)

    def process(self) -> None:
        raw = np.load(self.raw_paths[0])
        x = torch.from_numpy(raw['node_features'])  # [n, d]
        y = torch.from_numpy(raw['node_labels'])  # [n]
        edge_index = torch.from_numpy(raw['edges']).t().contiguous()  # [2, m]
        edge_index = to_undirected(edge_index, num_nodes=x.size(0))
        masks = {f'{split}_mask': torch.from_numpy(
            raw[f'{split}_masks']).t().contiguous()  # [n, 10]
            for split in ('train', 'val', 'test')}
        data = Data(x=x, y=y, edge_index=edge_index, **masks)
        if self.pre_transform is not None:
            data = self.pre_transform(data)
        self.save([data], self.processed_paths[0])

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(name={self.name})'
