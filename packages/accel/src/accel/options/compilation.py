"""The torch.compile option of the Accelerator: `dynamo_backend=` or `dynamo_plugin=` (Accelerate's
keywords), else what the launcher set (`ACCEL_DYNAMO_*`)."""

from __future__ import annotations

from accel_state.compilation.plugin import DynamoBackend, TorchDynamoPlugin, dynamo_backend_named


def resolve_dynamo_plugin(
    dynamo_backend: DynamoBackend | str | None, dynamo_plugin: TorchDynamoPlugin | None
) -> TorchDynamoPlugin:
    """Return the plugin `prepare` compiles with: the one given, one for `dynamo_backend` (its other
    fields from the environment), else one read from the environment (backend "no" when unset)."""
    if dynamo_plugin is not None and dynamo_backend is not None:
        raise ValueError("Accelerator: pass dynamo_plugin or dynamo_backend, not both")
    if dynamo_plugin is not None:
        if not isinstance(dynamo_plugin, TorchDynamoPlugin):
            raise TypeError(
                f"Accelerator: dynamo_plugin takes a TorchDynamoPlugin, got {type(dynamo_plugin).__name__}"
            )
        return dynamo_plugin
    if dynamo_backend is not None:
        dynamo_backend = dynamo_backend_named(dynamo_backend, "Accelerator: dynamo_backend")
    return TorchDynamoPlugin(backend=dynamo_backend)
