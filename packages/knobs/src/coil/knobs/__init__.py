"""coil.knobs: the one typed registry of coil's configuration (standard library only).

Every knob is declared once (`coil.knobs.declarations`) with its environment variable, type,
default, one-line meaning and owner package. Read a knob as an attribute, override it for a
scope, and hand child processes a typed environment::

    from coil.knobs import knobs
    knobs.fusion                                   # bool, read now (no caching)
    with knobs.override(fusion=False, cache_dir=p):
        ...
    subprocess.run(cmd, env=knobs.environ(cache_dir=p))

A malformed environment variable raises ValueError naming it; an unknown name raises
UnknownKnobError (an AttributeError and a KeyError) naming the known ones. `KNOBS` holds the
declarations (for per-compile options, cache keys and docs/configuration.md, which
`python -m coil.knobs --markdown` writes).
"""

from coil.knobs.declarations import KNOBS, OWNERS, Knobs, knobs
from coil.knobs.knob import Knob
from coil.knobs.registry import Registry, UnknownKnobError

__all__ = ["KNOBS", "OWNERS", "Knob", "Knobs", "Registry", "UnknownKnobError", "knobs"]
