"""Systems as data: presets, the topology grammar, the device model, calibration."""
