"""gnorm: normalisation layers and collapse metrics for deep graph networks."""

__version__ = "0.1.0"
