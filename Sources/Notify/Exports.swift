// The vocabulary the daemon and every client share (error codes, instance ids, name errors, the introspection
// documents) is declared once, in NotifyTypes, and is part of this library's API: `import Notify` is enough.
@_exported import NotifyTypes
