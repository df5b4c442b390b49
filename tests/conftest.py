import os

# Tests run on CPU; keep XLA from grabbing every core's worth of threads in each test process.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
