"""Architecture design-space exploration: spaces of accelerators, derived area and energy,
sweeps on a local pool or a distributed engine with a resumable store, memory co-search, Pareto fronts."""
