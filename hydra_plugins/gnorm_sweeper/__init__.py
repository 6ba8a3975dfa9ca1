r"""Hydra plugin of gnorm: ``hydra/sweeper=gnorm``, see
:mod:`gnorm.train.sweep`."""
