"""Plugins for training frameworks that load them by import path (axolotl: `liger_core.integrations.axolotl`)."""
