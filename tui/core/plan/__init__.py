"""Planning: the plan as data (``spec``), profile × topology × host → ``LaunchPlan`` (``planner``), preflight checks,
the host's facts and the GPU datasheet leads. Pure functions; may import only the core's shared modules.
"""
