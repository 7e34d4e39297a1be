"""A model as the simulator reads it: layers, their structure, traffic and memory."""
