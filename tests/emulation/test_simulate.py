"""The simulator against the real testbed (issue 16): ``ltp``'s synchronized pushes at 8 and 16
workers, 100 Mbit/s, a 64-packet bottleneck queue, no random loss, emulated (one testbed of 16
workers, 8 pushes per N) and simulated (the same scenario, seeds 1-3): the simulated median push
time within 15 % of the emulated one and the p99 within 25 % (harness/simulation/validate.py).
About 45 s, most of it the testbed and its 16-worker pushes.
"""

from harness.simulation import validate as val

WORKERS = (8, 16)
ITERATIONS = 8


def test_simulated_push_times_match_the_testbed(tmp_path):
    emulated = val.emulate(tmp_path, WORKERS, ITERATIONS)
    simulated = val.simulate(WORKERS, ITERATIONS, seeds=(1, 2, 3))
    rows = val.compare(emulated, simulated)
    for row in rows:
        print(f"N={row['n_workers']}: median {row['simulated_median_s']:.3f} s simulated, "
              f"{row['emulated_median_s']:.3f} s emulated (x{row['median_ratio']:.3f}); p99 "
              f"{row['simulated_p99_s']:.3f} against {row['emulated_p99_s']:.3f} (x{row['p99_ratio']:.3f})")
    for row in rows:
        assert abs(row["median_ratio"] - 1) <= val.MEDIAN_TOLERANCE, row
        assert abs(row["p99_ratio"] - 1) <= val.P99_TOLERANCE, row
