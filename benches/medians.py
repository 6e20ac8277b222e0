"""Prints the median of every criterion benchmark under target/criterion (ms).

    cargo bench --bench select && python3 benches/medians.py
"""
import json
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent / "target" / "criterion"
for est in sorted(root.glob("**/new/estimates.json")):
    name = str(est.parent.parent.relative_to(root))
    m = json.loads(est.read_text())["median"]["point_estimate"] / 1e6
    print(f"{name:<60} {m:10.2f} ms")
