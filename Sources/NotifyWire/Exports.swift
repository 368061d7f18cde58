// Frames carry the shared vocabulary (error codes, instance ids, name errors, introspection documents), so whoever
// reads frames sees it with `import NotifyWire`.
@_exported import NotifyTypes
