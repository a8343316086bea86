"""Tables, pictures and reports over the layers below."""

from accelmap.report.arch_diagram import arch_png, arch_text

__all__ = ["arch_png", "arch_text"]
