"""The vector core as the vectorizer needs it, read from an accelerator description (the aie_like preset):
data memory size and ports, vector register file, accumulator registers, the Lanes x Cols datapath.

Facts the accelerator format has no field for are constants here, each with its source."""

from __future__ import annotations

from dataclasses import dataclass

from accelmap.arch.accelerator import Accelerator
from accelmap.errors import SpecError

PROGRAM_MEMORY_BYTES = 16 * 1024     # Vyasa: "a 16KB program memory"
BUNDLE_BYTES = 16                    # a VLIW bundle is at most 128 bits (AI Engine architecture manual, AM009)
LOAD_PORTS = 2                       # Vyasa: "two vector load operations, one vector store operation"
STORE_PORTS = 1
# Latencies of the software-pipelined loop (assumed, of the order the AI Engine manual gives; not in the paper):
LOAD_TO_USE_CYCLES = 7
MAC_PIPELINE_CYCLES = 6
STORE_CYCLES = 2
ACC_UNIT_BITS = 384                  # one accumulator register (AM009); 768-bit accumulators are aligned pairs
OUTER_LOOP_CYCLES = 4                # pointer updates and the branch of a non-pipelined outer loop trip (assumed)
CALL_CYCLES = 20                     # kernel entry and exit (assumed)


@dataclass(frozen=True)
class Core:
    name: str
    lanes: int
    cols: int
    data_mem_bits: int
    load_port_bits: int              # per load port and cycle
    store_port_bits: int
    vrf_bits: int
    acc_bits: int

    @property
    def bytes_per_cycle(self) -> int:
        return (LOAD_PORTS * self.load_port_bits + STORE_PORTS * self.store_port_bits) // 8


def core_from_accelerator(acc: Accelerator) -> Core:
    """The 2D-SIMD level is the one with a Lanes x Cols fan-out; data memory is the outermost level."""
    where = acc.source or acc.name
    simd = next((lv for lv in acc.levels if lv.fanout is not None
                 and {a.name for a in lv.fanout.axes} >= {"Lanes", "Cols"}), None)
    if simd is None:
        raise SpecError("vectorize needs a level whose fan-out has axes Lanes and Cols (a 2D SIMD datapath, as in "
                        "the aie_like preset)", where=f"{where}: levels")
    assert simd.fanout is not None
    mem = acc.levels[0]
    accreg = next((lv for lv in acc.levels[1:] if lv.holds == ("O",)), None)
    if mem.capacity_bits is None or mem.read_bw_bits is None or mem.write_bw_bits is None:
        raise SpecError("the outermost level needs a capacity, read_bandwidth and write_bandwidth",
                        where=f"{where}: levels.{mem.name}")
    if simd.capacity_bits is None or accreg is None or accreg.capacity_bits is None:
        raise SpecError("vectorize needs a bounded vector register level and an accumulator level holding only O",
                        where=f"{where}: levels")
    return Core(acc.name, simd.fanout.axis("Lanes").size, simd.fanout.axis("Cols").size, mem.capacity_bits,
                int(mem.read_bw_bits) // LOAD_PORTS, int(mem.write_bw_bits) // STORE_PORTS, simd.capacity_bits,
                accreg.capacity_bits)
