"""Ray actors, one per role. Classes are plain; ``actors.factory`` applies ``ray.remote``."""
