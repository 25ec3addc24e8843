"""Fuzz targets written in Python (the C ones are in transports/native/fuzz): each module's
``run(data)`` takes one input and raises on a broken invariant, so the unit suite replays the
committed corpus without a fuzzer, and ``invoke fuzz`` drives it under atheris (libFuzzer)."""
