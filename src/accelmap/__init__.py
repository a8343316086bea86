"""accelmap: map DNN operators onto hardware accelerators."""

__version__ = "0.1.0"
