pytest_plugins = ["liger_core.conformance.plugin"]
