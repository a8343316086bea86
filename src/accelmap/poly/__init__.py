"""Polyhedral compilation of fused operator subgraphs for an Ascend-like NPU core (AKG, Zhao et al., PLDI 2021).

DSL or workload operator -> isl program (``program``) -> isl schedule with AKG's options (``schedule``) ->
reverse-strategy tiling, post-tiling fusion, storage promotion (``compile``) -> C from the isl AST
(``c_code``) and a DAE timing model (``timing``, ``sync``); ``tuner`` searches tile sizes.
"""
