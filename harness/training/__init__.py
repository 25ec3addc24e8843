"""Training: the numerics of a run, with no network in them.

- :mod:`.models`, :mod:`.datasets`: small registries of models and data sets (Fashion-MNIST from
  its Debian package);
- :mod:`.aggregators`: how the PS combines a round's updates (mean, score-based validation,
  median, trimmed mean, Krum);
- :mod:`.byzantine`: what a Byzantine worker pushes instead of its gradient;
- :mod:`.robust`: the PS's side of distrust (its combine function, honest estimates);
- :mod:`.compress`: compressed pushes (top-k, sign) with error feedback and its reset.
"""
