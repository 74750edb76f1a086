"""`dsv41 perplexity` on held-out text must equal the PyTorch implementation's figure within 1%.
Usage: check_perplexity.py DSV41_BINARY MODEL_DIR TEXT EXPECTED_PERPLEXITY"""
import re
import subprocess
import sys

binary, model, text, expected = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
out = subprocess.run([binary, "perplexity", "--model", model, "--text", text], capture_output=True, text=True,
                     timeout=900)
print(out.stdout, out.stderr)
m = re.search(r"perplexity ([0-9.]+)", out.stdout)
if out.returncode != 0 or not m:
    print("0 passed, 1 failed")
    sys.exit(1)
got = float(m.group(1))
rel = abs(got - expected) / expected
print(f"C++ {got:.4f} vs PyTorch {expected:.4f}: {100 * rel:.3f}% apart (bound 1%)")
ok = rel <= 0.01
print(f"{int(ok)} passed, {int(not ok)} failed")
sys.exit(0 if ok else 1)
