"""Tasks of ltp-testbed (``invoke --list``). Thin: argument plumbing only; logic lives in packages.

    invoke run-sweep                      # the default sweep into results/<preset>/ invoke
    run-sweep --preset smoke --loss 0,5 --iterations 20 invoke run-sweep --cluster auto       #
    each group of runs on a node of a Ray cluster invoke bench-network                  # the
    emulated network against its configuration invoke simulate --workers 8,64,1024 --out DIR   #
    the LTP/PLOT core at scale, simulated invoke publish [--check]              # every report,
    figure and published number, from the tables invoke clean                          # remove
    what a killed run left behind
"""

from __future__ import annotations

from pathlib import Path

from invoke import task

PROJECT = Path(__file__).resolve().parent


@task(auto_shortflags=False, help={
    "preset": "named sweep (smoke, ...); default: the README's default sweep",
    "out": "results folder (default results/<preset>); the same folder resumes",
    "redo": "finished runs to run again first: stale (other code than today's), failed, "
            "loaded:FRAC (other processes used more than FRAC of the CPU), comma-separated",
    "transports": "comma-separated schemes: slugs, optionally with options, e.g. "
                  "tcp-cubic,ltp,ltp+filler=zero",
    "loss": "comma-separated loss: uniform rates in percent, replay:RATE (seeded, the same "
            "drops for every scheme), Gilbert-Elliott models or trace:FOLDER, e.g. "
            "0,1,5,replay:5,ge:5:4,get:5:2 (5 % in bursts of 4 packets, or of 2 ms)",
    "bandwidth": "comma-separated bottleneck rates in Mbit/s",
    "workers": "comma-separated numbers of workers, e.g. 8,16,32",
    "queue": "comma-separated bottleneck queue lengths in packets, e.g. 8,32,64",
    "delay": "comma-separated one-way delays in ms, added at every host's ingress",
    "cross": "comma-separated background traffic through the bottleneck, e.g. "
             "none,tcp:2,udp:1:rate=50,on=50ms,off=150ms,tcp:1+udp:1",
    "sync": "comma-separated synchronisation modes: bsp, ssp:S (staleness bound S), async",
    "fault": "comma-separated faults: none, kill@K, stall@K:Ts, link@K:Ts, straggler:Fx "
             "(K: after the PS's K-th iteration; :wN names the worker, default the last)",
    "byzantine": "comma-separated Byzantine settings: 0 (none) or COUNT:BEHAVIOUR[:PARAM] with "
                 "behaviour sign-flip, scaled, gaussian, random, alie or ipm, e.g. 0,2:sign-flip "
                 "(the highest ranks attack; docs/byzantine.md)",
    "aggregator": "comma-separated aggregation rules at the PS: mean, score, median, "
                  "trimmed-mean, krum, zeno++ (zeno++ also under ssp and async)",
    "tolerate": "Byzantine updates the aggregator tolerates (default: the attacker count)",
    "compress": "comma-separated push compressions: none, topk:R (fraction R of each layer "
                "kept, default 0.01), sign (docs/compression.md)",
    "local_steps": "comma-separated SGD steps per synchronisation, e.g. 1,4",
    "error_reset": "comma-separated error-reset periods in synchronisations (0: never; "
                   "default 1, every synchronisation)",
    "reset_mode": "comma-separated reset modes: drop (the residual is dropped at a reset) or cser "
                  "(synchronised every --error-reset gradient rounds; docs/compression.md)",
    "pattern": "comma-separated communication patterns: ps, tree[:fanout=F,root=R,chunks=C], "
               "ring[:pieces=P] (docs/collectives.md)",
    "score_batch": "validation samples per round of the score rule, per parameter version of "
                   "zeno++ (default 64)",
    "score_penalty": "the score and zeno++ rules' penalty rho on an update's squared size "
                     "(default 0.0005)",
    "score_threshold": "the score rule keeps only updates scoring at least this (default: the "
                       "n - f best, no threshold); zeno++ accepts a score of at least minus "
                       "this (default 0)",
    "holdout": "comma-separated numbers of training samples the PS keeps as its own validation "
               "set, which no worker trains on: 0 (none), or from --score-batch up to half the "
               "training set; score and zeno++ only (docs/byzantine.md)",
    "model": "comma-separated models, e.g. lenet5,mlp6 (harness/training/models.py lists them); "
             "each is measured to its own target unless --target is given",
    "iterations": "training iterations per run",
    "seeds": "comma-separated seeds",
    "timeout": "per-run timeout in seconds",
    "target": "test accuracy that time-to-accuracy measures (default: the model's, 0.80 for mlp)",
    "stop_at_target": "end each run at the first evaluation that reaches the target",
    "max_train": "cap on each run's training time at the PS, in seconds",
    "cluster": "run each group of runs sharing a network on a node of a Ray cluster: the head's "
               "address (HOST:6379) or auto (docs/cluster.md); without it, on this machine",
    "no_figures": "write the tables and the report but draw no figure (invoke figures draws "
                  "them later)",
    "capture": "comma-separated hosts whose packets each run records into "
               "runs/<run_id>/capture/<host>.pcap, e.g. ps1 or ps1,w1 (default none; costs CPU; "
               "docs/reading-a-capture.md)",
    "capture_snaplen": "bytes kept of each captured packet (default 128: every header)",
    "capture_mb": "size bound of each capture file in MB; tcpdump stops once it is full "
                  "(default 200)",
    "dry_run": "check the command and list the runs it would make, by id; run nothing",
})
def run_sweep(c, preset=None, out=None, transports=None, loss=None, bandwidth=None, workers=None,
              queue=None, delay=None, cross=None, sync=None, fault=None, byzantine=None,
              aggregator=None, tolerate=None, score_batch=None, score_penalty=None,
              score_threshold=None, compress=None, local_steps=None, error_reset=None,
              reset_mode=None, holdout=None, pattern=None,
              model=None,
              iterations=None, seeds=None, timeout=None, target=None, stop_at_target=False,
              max_train=None, cluster=None, no_figures=False, redo=None, capture=None,
              capture_snaplen=None, capture_mb=None, dry_run=False):
    """Run a sweep of training runs over the emulated incast network and tabulate the results."""
    from harness import cli

    with cli.user_errors():
        from harness.p2p import spec as p2p
        from harness.running import presets
        from harness.running import engine

        again = engine.parse_redo(redo)
        if preset in p2p.PRESETS:
            given = [name for name, value in locals().items() if name not in (
                "c", "preset", "out", "seeds", "iterations", "loss", "sync", "timeout", "cli",
                "presets", "engine", "p2p", "no_figures", "redo", "again", "capture",
                "capture_snaplen", "capture_mb", "dry_run")
                and value not in (None, False)]
            if given:
                raise p2p.PeerSpecError(f"--{given[0].replace('_', '-')} does not apply to the "
                                    f"peer-to-peer preset {preset}; it takes --seeds, "
                                    "--iterations (rounds), --loss, --sync, --timeout, --redo, "
                                    "--capture and --no-figures.")
            plan = p2p.get(preset).override(
                seeds=cli.numbers(seeds, int, "--seeds"),
                rounds=cli.number(iterations, int, "--iterations"),
                loss_pcts=cli.numbers(loss, float, "--loss"), syncs=cli.items(sync),
                timeout_s=cli.number(timeout, float, "--timeout"))
            folder = Path(out) if out else PROJECT / "results" / plan.name
            engine.check_folder(folder)
            captured = _capture(plan, capture, capture_snaplen, capture_mb)
            if dry_run:
                return _list_plan(plan, folder)
            cli.require_root()
            cli.require_setup(("tcpdump",) if captured else ())
            engine.run_plan(plan, folder, figures=not no_figures, redo=again, capture=captured)
            return
        plan = presets.get(preset or presets.DEFAULT_PRESET).override(
            transports=cli.words(transports), loss_pcts=cli.losses(loss), cross=cli.items(cross),
            bottleneck_mbps=cli.numbers(bandwidth, float, "--bandwidth"),
            delays_ms=cli.numbers(delay, float, "--delay"),
            seeds=cli.numbers(seeds, int, "--seeds"),
            workers=cli.numbers(workers, int, "--workers"),
            queues=cli.numbers(queue, int, "--queue"), syncs=cli.syncs(sync),
            faults=cli.faults(fault), byzantine=cli.byzantines(byzantine),
            aggregators=cli.aggregator_names(aggregator),
            compressions=cli.compressions(compress),
            local_steps=cli.numbers(local_steps, int, "--local-steps"),
            error_resets=cli.numbers(error_reset, int, "--error-reset"),
            reset_modes=cli.words(reset_mode),
            holdouts=cli.numbers(holdout, int, "--holdout"),
            patterns=cli.patterns(pattern),
            tolerate=cli.number(tolerate, int, "--tolerate"),
            score_batch=cli.number(score_batch, int, "--score-batch"),
            score_penalty=cli.number(score_penalty, float, "--score-penalty"),
            score_threshold=cli.number(score_threshold, float, "--score-threshold"),
            models=cli.words(model),
            iterations=cli.number(iterations, int, "--iterations"),
            timeout_s=cli.number(timeout, float, "--timeout"),
            target_accuracy=cli.number(target, float, "--target"),
            stop_at_target=True if stop_at_target else None, max_train_s=cli.number(max_train, float, "--max-train"))
        folder = Path(out) if out else PROJECT / "results" / plan.name
        engine.check_folder(folder)
        captured = _capture(plan, capture, capture_snaplen, capture_mb)
        if dry_run:
            return _list_plan(plan, folder)
        if cluster and captured:
            raise engine.SweepError("--capture runs on this machine only; drop --cluster or "
                                    "--capture.")
        if cluster:
            # The head only coordinates (no root, no network here); Ray is imported only now.
            from harness.running import cluster as ray_cluster

            ray_cluster.run_plan(plan, folder, cluster, figures=not no_figures, redo=again)
            return
        cli.require_root()
        cli.require_setup(("tcpdump",) if captured else ())
        engine.run_plan(plan, folder, figures=not no_figures, redo=again, capture=captured)


def _capture(plan, hosts, snaplen, max_mb):
    """The sweep's :class:`~harness.running.capture.Capture` (None without --capture), checked
    against every run of ``plan``."""
    from harness import cli
    from harness.running import engine
    from harness.running.capture import parse_capture

    captured = parse_capture(hosts, cli.number(snaplen, int, "--capture-snaplen"),
                             cli.number(max_mb, float, "--capture-mb"))
    engine.check_capture(plan, captured)
    return captured


def _list_plan(plan, folder: Path) -> None:
    """--dry-run: the runs the sweep would make (by id) and where, and nothing else."""
    specs = plan.specs()
    print(f"{len(specs)} runs of preset {plan.name} into {folder}:")
    for spec in specs:
        print(f"  {spec.run_id}")


@task(help={
    "bandwidth": "bottleneck rate in Mbit/s (default 100)",
    "queue": "bottleneck queue in packets (default 64)",
    "loss": "random loss in percent for the loss check (default 5)",
    "seconds": "duration of each throughput test (default 5)",
})
def bench_network(c, bandwidth="100", queue="64", loss="5", seconds="5"):
    """Measure the emulated network: one flow, 8-to-1 incast, queue drops, measured vs set loss."""
    from harness import cli

    with cli.user_errors():
        from harness.bench import run as bench

        args = bench.network_args(cli.number(bandwidth, float, "--bandwidth"),
                                  cli.number(queue, int, "--queue"),
                                  cli.number(loss, float, "--loss"),
                                  cli.number(seconds, float, "--seconds"))
        cli.require_root()
        cli.require_setup()
        bench.network(*args)


@task(help={
    "scheme": "a TCP scheme: tcp-cubic, tcp-cubic-lowrto, tcp-bbr or tcp-reno (default tcp-cubic)",
    "workers": "number of workers (default 8)",
    "bandwidth": "bottleneck rate in Mbit/s (default 100)",
    "queue": "bottleneck queue in packets (default 64)",
    "loss": "random loss in percent at every host's ingress (default 0)",
    "pushes": "synchronized pushes (default 10)",
    "period": "seconds from one push to the next (default 0.5)",
    "bytes": "bytes each worker pushes (default: one gradient of the MLP)",
    "interval": "sampling interval in ms (default 1)",
    "out": "folder for series.csv, series.png and the raw samples "
           "(default results/bench/series-<time>)",
})
def bench_series(c, scheme="tcp-cubic", workers="8", bandwidth="100", queue="64", loss="0",
                 pushes="10", period="0.5", bytes=None, interval="1", out=None):
    """Millisecond time series of an incast: the bottleneck queue and each sender's congestion
    window, RTT and timeouts while every worker pushes a gradient at once (lab 1)."""
    from harness import cli

    with cli.user_errors():
        from harness.bench import run as bench, series

        args = series.series_args(scheme, cli.number(workers, int, "--workers"),
                                  cli.number(bandwidth, float, "--bandwidth"),
                                  cli.number(queue, int, "--queue"),
                                  cli.number(loss, float, "--loss"),
                                  cli.number(pushes, int, "--pushes"),
                                  cli.number(period, float, "--period"),
                                  cli.number(bytes, int, "--bytes") if bytes else
                                  bench.mlp_bytes(),
                                  cli.number(interval, float, "--interval"))
        cli.require_root()
        cli.require_setup()
        path = series.run(*args, Path(out) if out else None)
        print(f"the samples: {path}; the figure: {path.with_name('series.png')}")


@task(help={
    "workers": "number of workers (default 8)",
    "loss": "loss at every host's ingress: a rate in percent or any model --loss of run-sweep "
            "takes, e.g. 5 or ge:5:4 (default 0)",
    "transport": "the scheme whose host settings apply, e.g. ltp, tcp-cubic, ltp+filler=zero "
                 "(default ltp)",
    "bandwidth": "bottleneck rate in Mbit/s (default 100)",
    "delay": "one-way delay in ms at every host's ingress (default 0)",
    "queue": "bottleneck queue in packets (default 64)",
    "out": "folder for the network's and the prepared run's files (default .state/shell)",
})
def shell(c, workers="8", loss="0", transport="ltp", bandwidth="100", delay="0", queue="64",
          out=None):
    """Bring up the incast network with loss, delay and a transport's settings, and open
    Mininet's command line in it; everything is taken down on exit."""
    from harness import cli

    with cli.user_errors():
        from harness.running import shell as interactive
        from topologies.testbed.network import STATE_DIR

        spec = interactive.shell_spec(transport, cli.number(workers, int, "--workers"), loss,
                                      cli.number(bandwidth, float, "--bandwidth"),
                                      cli.number(delay, float, "--delay"),
                                      cli.number(queue, int, "--queue"))
        cli.require_root()
        cli.require_setup()
        interactive.open_shell(spec, Path(out) if out else STATE_DIR / "shell")


@task
def clean(c):
    """Remove what a killed testbed left behind (its processes, links, OVS), and only that."""
    from harness import cli

    with cli.user_errors():
        cli.require_root()
        from topologies.testbed.network import clean as clean_testbed

        removed = clean_testbed()
        print("\n".join(removed) if removed else "nothing to clean.")


@task(help={"slug": "show only this scheme (default: every registered one)"})
def transports(c, slug=None):
    """List the registered transports, each with its options (default, values, unit, meaning)."""
    from harness import cli

    with cli.user_errors():
        from transports import options_doc

        print(options_doc.schemes_text(slug))


@task
def docs(c):
    """Regenerate docs/results-schema.md and the transport option tables in docs/."""
    from harness import cli

    with cli.user_errors():
        from harness.running import results
        from transports import options_doc

        path = PROJECT / "docs" / "results-schema.md"
        head = path.read_text().split("<!-- generated -->")[0] if path.exists() else ""
        path.write_text(head + "<!-- generated -->\n\n" + results.schema_markdown())
        print(f"wrote {path}")
        for page in options_doc.regenerate(PROJECT):
            print(f"wrote {page}")


@task(help={
    "transports": "comma-separated slugs (default ltp,tcp-cubic)",
    "loss": "comma-separated loss rates in percent (default 0,1,5,10)",
    "bandwidth": "comma-separated bottleneck rates in Mbit/s (default 100,200)",
    "iterations": "synchronized pushes per cell (default 20)",
    "queue": "bottleneck queue in packets (default 64)",
    "loopback_only": "only the loopback part (goodput and CPU per byte); no emulated network, "
                     "no root needed",
    "repeats": "repetitions of the loopback part, schemes interleaved (default 5)",
    "out": "the folder of the tables (default: a new one under results/bench/); a folder given "
           "again resumes its loopback runs",
    "redo": "loopback runs of --out to run again, as run-sweep's --redo (stale, failed, "
            "loaded:FRAC)",
})
def bench_transport(c, transports="ltp,tcp-cubic", loss="0,1,5,10", bandwidth="100,200",
                    iterations="20", queue="64", loopback_only=False, repeats="5", out=None,
                    redo=None):
    """Loopback goodput and CPU per byte, and 8-to-1 push time per transport vs the physical
    bound."""
    from harness import cli

    with cli.user_errors():
        from harness.bench import run as bench

        args = bench.transport_args(cli.words(transports), cli.numbers(loss, float, "--loss"),
                                    cli.numbers(bandwidth, float, "--bandwidth"),
                                    cli.number(iterations, int, "--iterations"),
                                    cli.number(queue, int, "--queue"), loopback_only,
                                    cli.number(repeats, int, "--repeats"))
        if not loopback_only:
            cli.require_root()
            cli.require_setup()
        bench.transport(*args, out=Path(out) if out else None, redo=redo)


@task(help={"sweep": "the sweep folder (holding runs.csv)"})
def figures(c, sweep):
    """Regenerate every figure and the report of a sweep from its tables alone."""
    from harness import cli

    with cli.user_errors():
        from harness.p2p import report as p2p_report
        from harness.reporting import figures as fig

        folder = Path(sweep)
        if p2p_report.is_p2p(folder):
            print(p2p_report.write(folder))
            return
        for path in fig.make(folder):
            print(path)


@task(help={"lab": "the lab's number (docs/labs/README.md)",
            "sweep": "the folder the lab's run-sweep wrote (default results/labN)",
            "answers": "a TOML file of your numeric answers, one per question: q1 = 0.25"})
def lab_check(c, lab, sweep=None, answers=None):
    """Grade a lab on your results folder: question by question, what is right and what is not,
    with the numbers compared; exits 1 if anything is wrong."""
    from invoke import Exit

    from harness import cli

    with cli.user_errors():
        from harness.reporting.labs import grading

        number = cli.number(lab, int, "lab")
        folder = Path(sweep) if sweep else PROJECT / "results" / f"lab{number}"
        sheet = grading.grade(number, folder,
                              grading.read_answers(Path(answers) if answers else None))
        print(sheet.text())
        if not sheet.passed:
            raise Exit(code=1)


@task(help={"check": "write nothing; list what would change and fail if anything would",
            "no_figures": "regenerate the text only (reports, generated blocks, the findings "
                          "page), not the figures"})
def publish(c, check=False, no_figures=False):
    """Regenerate everything published (reports, figures, README and docs blocks, findings)
    from the committed tables; --check fails on any difference."""
    from invoke import Exit

    from harness import cli

    with cli.user_errors():
        from harness.reporting.publish import build

        out = build.publish(check=check, figures=not no_figures and not check,
                            say=lambda line: None)
        if check:
            if out.changed:
                raise Exit("published files differ from what the tables give (run "
                           ".venv/bin/invoke publish): " + ", ".join(out.changed), code=1)
            print("every published file matches the tables.")
            return
        print("\n".join(f"wrote {p}" for p in out.changed) or "nothing changed.")
        if out.figures:
            print(f"redrew {out.figures} figure files.")


@task(help={"seconds": "how long each MAC is timed at each datagram size (default 0.3)"})
def bench_mac(c, seconds="0.3"):
    """What each MAC of `auth` costs per datagram size on this machine: ns per tag and GB/s
    (with the staged AES-NI GMAC of transports/native/gmac/ beside OpenSSL's)."""
    from harness import cli

    with cli.user_errors():
        t = cli.number(seconds, float, "--seconds")
        native = PROJECT / "transports" / "native"
        c.run(f"make -s -C {native} bench-mac BENCH_MAC_SECONDS={t}", pty=False)


@task(help={"seconds": "how long libFuzzer drives the stateful core target (default 60)",
            "rx_seconds": "how long it then drives the driver's receive batches and the core's "
                          "placement (default 30)",
            "udp_seconds": "how long it then fuzzes the UDP driver's parsing (default 10)",
            "peer_seconds": "how long atheris drives the multicast peer transport's receiving "
                            "half (tests/fuzz/peer_rx.py; default 30)",
            "jobs": "processes per target (default 1)",
            "merge": "then add what the grown corpora reach anew to the committed ones"})
def fuzz(c, seconds=60, rx_seconds=30, udp_seconds=10, peer_seconds=30, jobs=1, merge=False):
    """Fuzz the LTP core's state machine, the driver's receive path and its parsing (libFuzzer,
    ASan and UBSan), and the multicast receiver (atheris); then print the coverage per file."""
    native = PROJECT / "transports" / "native"
    c.run(f"make -C {native} fuzz FUZZ_SECONDS={int(seconds)} FUZZ_RX_SECONDS={int(rx_seconds)} "
          f"FUZZ_UDP_SECONDS={int(udp_seconds)} FUZZ_JOBS={int(jobs)}", pty=False)
    grown = native / "build" / "fuzz-corpus" / "peer_rx"
    grown.mkdir(parents=True, exist_ok=True)
    committed = PROJECT / "tests" / "fuzz" / "corpus" / "peer_rx"
    py = PROJECT / ".venv" / "bin" / "python"
    workers = f"-jobs={int(jobs)} -workers={int(jobs)} " if int(jobs) > 1 else ""
    c.run(f"cd {PROJECT} && {py} -m tests.fuzz peer_rx -max_total_time={int(peer_seconds)} "
          f"-seed=1 -max_len=1024 -print_final_stats=1 {workers}{grown} {committed}", pty=False)
    if merge:
        c.run(f"make -s -C {native} fuzz-merge", pty=False)
        c.run(f"cd {PROJECT} && {py} -m tests.fuzz peer_rx -merge=1 -use_counters=0 {committed} {grown}",
              pty=False)
    c.run(f"make -s -C {native} fuzz-cov", pty=False)
    print("coverage per file of the multicast receiver over its corpora (tests/fuzz/peer_rx.py):")
    data = native / "build" / "peer_rx.coverage"
    c.run(f"cd {PROJECT} && COVERAGE_FILE={data} {py} -m coverage run --branch "
          f"--include='transports/peer/auth.py,transports/peer/inbound.py,transports/peer/wire.py' -m tests.fuzz.peer_rx {grown} {committed} && "
          f"COVERAGE_FILE={data} {py} -m coverage report", pty=False)


@task(help={
    "out": "results folder (default results/simulate); the same folder resumes",
    "workers": "comma-separated numbers of workers, e.g. 8,64,1024 (default 8)",
    "transports": "comma-separated schemes: ltp, ltp-reliable, plot (default ltp)",
    "bandwidth": "comma-separated link rates in Mbit/s, every link (default 10000: data-centre "
                 "links; the testbed's are 100-200)",
    "queue": "comma-separated bottleneck queue lengths in packets (default 256)",
    "loss": "comma-separated loss at every host's ingress: rates in percent or per-packet "
            "Gilbert-Elliott models, e.g. 0,1,ge:5:4 (default 0)",
    "delay": "comma-separated one-way delays in ms (default 0)",
    "seeds": "comma-separated seeds (default 1)",
    "iterations": "iterations per run (default 2; 1,024 workers take minutes per iteration)",
    "scenario": "push (synchronized pushes, as bench-transport) or bsp (training iterations)",
    "host": "ideal (instant hosts) or testbed (the lateness of this 2-core machine's testbed)",
    "compute_ms": "bsp: each worker's compute per iteration in ms (default 0)",
    "update_ms": "bsp: the PS's update per iteration in ms (default 0)",
    "redo": "simulated runs of --out to run again first, as run-sweep's --redo (stale, failed, "
            "loaded:FRAC)",
})
def simulate(c, out=None, workers="8", transports="ltp", bandwidth="10000", queue="256", loss="0",
             delay="0", seeds="1", iterations="2", scenario="push", host="ideal", compute_ms="0",
             update_ms="0", redo=None):
    """Simulate the LTP/PLOT core (the same C code) at N workers; write tables and figures."""
    from harness import cli

    with cli.user_errors():
        from harness.running import engine
        from harness.simulation import driver as sim
        from harness.simulation import kind

        grid = sim.cells(cli.words(transports), cli.numbers(workers, int, "--workers"),
                         cli.numbers(bandwidth, float, "--bandwidth"),
                         cli.numbers(queue, int, "--queue"), cli.losses(loss),
                         cli.numbers(delay, float, "--delay"), cli.numbers(seeds, int, "--seeds"),
                         iterations=cli.number(iterations, int, "--iterations"), scenario=scenario,
                         host=host, compute_ms=cli.number(compute_ms, float, "--compute-ms"),
                         update_ms=cli.number(update_ms, float, "--update-ms"))
        folder = Path(out) if out else PROJECT / "results" / "simulate"
        engine.check_folder(folder)
        engine.run_plan(kind.SimPlan("simulate", tuple(grid)), folder,
                        redo=engine.parse_redo(redo))


@task(help={"workers": "comma-separated numbers of workers (default 8,64,256,1024,4096,8192)",
            "bandwidth": "link rate in Mbit/s (default 100000)",
            "iterations": "iterations per run (default 2)",
            "min_pushes": "a run has at least this many pushes in all: small N get more "
                          "iterations (default 1024)"})
def bench_simulate(c, workers="8,64,256,1024,4096,8192", bandwidth="100000", iterations="2",
                   min_pushes="1024"):
    """The simulator's own cost against N: wall time, events/s, peak memory, PS core us/datagram."""
    from harness import cli

    with cli.user_errors():
        from harness.simulation import kind

        kind.bench(cli.numbers(workers, int, "--workers"),
                  cli.number(bandwidth, float, "--bandwidth"),
                  cli.number(iterations, int, "--iterations"),
                  cli.number(min_pushes, int, "--min-pushes"))


@task(help={"folders": "comma-separated results folders (default: every stale published one)",
            "plan": "only list the stale folders and the commands that would run",
            "loaded": "a run during which other processes took more than this share of the "
                      "machine is run again (default 0.01)",
            "passes": "passes over a folder at most while runs are loaded or failed (default 3)"})
def refresh(c, folders="", plan=False, loaded="0.01", passes="3"):
    """Rerun the stale committed results folders at today's code (their own commands, --redo)."""
    from harness import cli

    with cli.user_errors():
        from harness.running import refresh as fresh

        items = fresh.plan(cli.words(folders) if folders else ())
        for it in items:
            how = ("by hand" if it.by_hand else "its recorded runs" if it.recorded
                   else "its commands")
            missing = f", {it.missing} recorded runs missing" if it.missing else ""
            print(f"{it.rel}: {it.stale} of {it.runs} runs stale{missing}, {it.hours:.1f} h of "
                  f"runs last time ({how})")
            for cmd in it.commands:
                print(f"    invoke {cmd}")
        if not items:
            print("every published folder is fresh at today's code and complete")
        if plan or not items:
            return
        cli.require_root()
        cli.require_setup()
        left = fresh.refresh(items, cli.number(loaded, float, "--loaded"),
                             cli.number(passes, int, "--passes"))
        if left:
            print("refresh these by hand (their commands are not run-sweep): " + ", ".join(left))
