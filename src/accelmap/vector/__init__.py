"""Vectorization of convolutions onto a 2D-SIMD core with a shuffle network (AI-Engine-like), after Vyasa
(Chatarasi et al.): intrinsic emulation, the six-step compiler, C++ emission, a VLIW cycle model and a tuner.

Nothing below the CLI imports this layer."""
