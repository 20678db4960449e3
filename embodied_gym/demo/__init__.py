"""``embodied-gym demo``: the whole Real2Sim2Real loop on the stand-in robot, with an HTML report."""
