"""Ray actors, one per role. Classes are plain; ``vak_context.actors.factory`` applies ``ray.remote``."""
