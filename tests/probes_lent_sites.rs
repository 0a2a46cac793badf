//! Placeholder: helper-50 writes the probes here.
