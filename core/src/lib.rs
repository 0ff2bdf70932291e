//! fusewire-core: the sans-IO resilience engine.
