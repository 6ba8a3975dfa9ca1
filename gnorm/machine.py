r"""The machine that runs a job, as one dict (:func:`this_machine`), and that
dict in words where a report needs text (:func:`machine_words`). Run records
(``results.json``), benchmark records and reports take it from here."""
import os
import platform
from typing import Any, Dict

import torch


def cpu_name() -> str:
    r"""The CPU's model name (``/proc/cpuinfo``), else what
    :mod:`platform` knows."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def denormals_flushed() -> bool:
    r"""Whether this thread's CPU reads and writes float32 numbers below
    the normal range (denormals, under 1.18e-38) as zero
    (:func:`torch.set_flush_denormal`), read off one multiplication."""
    return (torch.tensor([1e-39]) * 1.0).item() == 0.0


def this_machine(device: Any = 'cpu') -> Dict[str, Any]:
    r"""What runs on :obj:`device`: the CPU model (``cpu``), its cores
    (``cpu_count``), torch's thread count (``threads``), whether denormals
    are flushed to zero (``denormals_flushed``, for the CPU only), the GPU
    (``gpu``, for a CUDA device only) and torch's version (``torch``)."""
    device = torch.device(device)
    info: Dict[str, Any] = {'cpu': cpu_name(), 'cpu_count': os.cpu_count(),
                            'threads': torch.get_num_threads()}
    if device.type == 'cpu':
        info['denormals_flushed'] = denormals_flushed()
    if device.type == 'cuda':
        info['gpu'] = torch.cuda.get_device_name(device)
    info['torch'] = torch.__version__
    return info


def machine_words(info: Dict[str, Any]) -> str:
    r""":func:`this_machine`'s dict in words for a report's head: the GPU where
    there is one, else the CPU, its cores and torch's threads; with torch's
    version where the dict has it."""
    torch_version = f" (torch {info['torch']})" if info.get('torch') else ''
    if info.get('gpu'):
        return f"{info['gpu']}{torch_version}"
    return (f"{info['cpu']}, {info['cpu_count']} cores, "
            f"{info['threads']} threads{torch_version}")
