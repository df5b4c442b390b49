import os

# Tests run on CPU; keep XLA from grabbing every core's worth of threads in each test process.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Headless rendering; must be set before mujoco is imported (gymnasium_robotics imports it).
os.environ.setdefault("MUJOCO_GL", "egl")
