"""Lesson 06, section 6 ("How many splits?"): GB/s of the reference's decode step against num_splits, around the
count where the grid grows past one wave of programs, and what num_splits=None picks. GPU only.

    python -m benchmarks.lesson06_waves            # B = 1, Hq = Hkv = 32, N = 128k, d = 128, fp16; and B = 1 and 8 at Hkv = 8

The notebook quotes these numbers; its own cells measure the same on the learner's GPU.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main():
    import torch
    import triton.testing
    from benchmarks.bench import load_reference
    ref = load_reference("06_flash_decoding")
    print(f"{torch.cuda.get_device_name()}, {ref.sm_count(torch.device('cuda'))} SMs, torch {torch.__version__}, "
          f"triton {triton.__version__}; read probe {ref.read_bandwidth(gib=4):.0f} GB/s")
    for batch, kv_heads, n, counts in [(1, 32, 131072, (8, 15, 16, 17, 24, 32)),
                                       (1, 8, 131072, (1, 16, 32, 64, 66, 67, 128)),
                                       (8, 8, 32768, (1, 4, 8, 9, 16, 32))]:
        q = torch.randn(batch, 32, 1, 128, device="cuda", dtype=torch.float16)
        k, v = (torch.randn(batch, kv_heads, n, 128, device="cuda", dtype=torch.float16) for _ in range(2))
        seqlens = torch.full((batch,), n, dtype=torch.int32, device="cuda")
        nbytes = ref.kv_bytes(seqlens, kv_heads, 128)
        block_n = ref.decode_config(128, False, q.device)[0]
        chosen = ref.choose_num_splits(batch, kv_heads, n, ref.sm_count(q.device), block_n)
        cells = []
        for splits in sorted(set(counts) | {chosen}):
            ms = triton.testing.do_bench(lambda: ref.flash_decode(q, k, v, seqlens, num_splits=splits))
            cells.append(f"{splits}: {nbytes / ms / 1e6:.0f}" + (" (num_splits=None)" if splits == chosen else ""))
        print(f"B={batch} Hkv={kv_heads} N={n} (programs = B·Hkv·splits = {batch * kv_heads}·splits), GB/s by "
              f"num_splits: " + ", ".join(cells), flush=True)
        del q, k, v


if __name__ == "__main__":
    main()
