"""Re-measure lesson 05's causal backward against sdpa-flash (fp16, B=4) after a table change; prints one line a point."""
import sys, torch
sys.argv = ["bench"]
from benchmarks import bench
from triton.testing import do_bench
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
bench.torch = torch
m = bench.load_reference("05_flash_attention_v2")
for D, H in ((64, 32), (128, 16)):
    for N in (4096, 8192, 16384):
        q, k, v = (torch.randn(4, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
        f = bench.flops(4, H, N, D, True, "bwd")
        ours = bench.measure(lambda q, k, v, c: m.flash_attention(q, k, v, causal=c), q, k, v, True, "bwd")
        def sd(q, k, v, c):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=c)
        ref = bench.measure(sd, q, k, v, True, "bwd")
        print(f"bwd causal D={D} N={N}: lesson05 {f/ours*1e-9:.0f} TFLOP/s, sdpa-flash {f/ref*1e-9:.0f}, ratio {ref/ours:.2f}", flush=True)
