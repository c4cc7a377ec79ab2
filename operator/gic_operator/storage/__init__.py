"""The job storage seam: a GICJob's checkpoint storage through the runtime core, its
control-request files, bounded reads of driver files, and what a driver reported there."""
