"""One module per op: its declaration (`liger_core.op.Op`) with the contract, argument checks,
reference, oracle, samples, bad inputs and benchmark spec. Modules starting with ``_`` hold
what an op family shares."""
