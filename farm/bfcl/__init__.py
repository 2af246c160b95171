"""BFCL v4 (the ``bfcl-eval`` package) as a third-party benchmark, run direct and through the engine.

``multiturn``: the multi-turn entries, backends and checker; ``modes``: the two ways a model's calls are made;
``report``: both modes over categories (``bench/bfcl.py``); ``single``: the single-turn categories and their
AST checker; ``history``: single-turn questions after recorded history (``bench/bfcl_history.py``);
``scripted`` and ``single_model``: the scripted upstreams that degrade past a threshold; ``degrade``: the
engine against one (``bench/bfcl_degrade.py``); ``unit`` and ``tasks``: the farm's ``bfcl``,
``bfcl_history`` and ``bfcl_degrade`` units; ``plot``: accuracy against request size.
"""
