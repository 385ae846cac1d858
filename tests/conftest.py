"""Suite-wide test settings.

Hypothesis: its timing checks (a per-example deadline, "data generation too slow") measure the
machine, not the code, and CI shares its machine; they are off for every test. What a test
checks stays random: each run explores new examples, and a failure prints its seed.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("toolwatch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("toolwatch")
