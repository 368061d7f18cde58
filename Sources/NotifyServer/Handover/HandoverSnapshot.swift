import NotifyWire

/// Everything a daemon hands to its successor so that clients notice nothing: the sequence counter, state values,
/// retained notifications, and each connection as it stood (credentials, handshake, subscriptions, suspension,
/// the bytes not yet written to it and the bytes read from it but not yet served). Client sockets travel beside
/// it, matched by their kernel socket cookie. Encoded by `HandoverSnapshot+Coding.swift`.
package struct HandoverSnapshot: Sendable, Equatable {
    /// The daemon's instance id: kept, since a hand-over is not a restart.
    package var instanceID: InstanceID
    /// The sequence number of the last accepted post: the successor continues after it.
    package var lastSequence: UInt64
    /// The last connection number given out.
    package var lastConnectionNumber: UInt64
    /// The daemon-wide counters `status` reports.
    package var counters: Counters
    /// State values by name.
    package var states: [State]
    /// Retained notifications.
    package var retained: [Retained]
    /// The connections, in connection-number order.
    package var peers: [PeerRecord]

    /// The daemon-wide counters `status` reports, in the order the format writes them.
    package struct Counters: Sendable, Equatable {
        package var connectionsAccepted: UInt64 = 0
        package var posts: UInt64 = 0
        package var deliveries: UInt64 = 0
        package var merged: UInt64 = 0
        package var dropped: UInt64 = 0
        package var slowConsumerDisconnects: UInt64 = 0
        package var acceptFailures: UInt64 = 0
        package var connectionsRefused: UInt64 = 0

        /// All zero.
        package init() {}
    }

    /// A state value and the user it is charged to.
    package struct State: Sendable, Equatable {
        package var name: String
        package var value: UInt64
        package var ownerUID: UInt32

        package init(name: String, value: UInt64, ownerUID: UInt32) {
            self.name = name
            self.value = value
            self.ownerUID = ownerUID
        }
    }

    /// A retained notification and the user it is charged to.
    package struct Retained: Sendable, Equatable {
        package var name: String
        package var sequence: UInt64
        package var sender: SenderCredentials
        package var ownerUID: UInt32
        package var payload: [UInt8]
        /// The relay origin of a post made with the origin flag (format 3; `nil` when read from formats 1 and 2).
        package var origin: RelayOrigin?

        package init(
            name: String, sequence: UInt64, sender: SenderCredentials, ownerUID: UInt32, payload: [UInt8],
            origin: RelayOrigin? = nil
        ) {
            self.name = name
            self.sequence = sequence
            self.sender = sender
            self.ownerUID = ownerUID
            self.payload = payload
            self.origin = origin
        }
    }

    /// One connection.
    package struct PeerRecord: Sendable, Equatable {
        /// The socket's cookie (`SO_COOKIE`): which of the handed-over sockets is this connection's.
        package var cookie: UInt64
        /// Its connection number.
        package var number: UInt64
        /// Its credentials from `SO_PEERCRED` when it connected.
        package var credentials: SenderCredentials
        /// Its groups, as looked up when it connected.
        package var groups: [UInt32]
        /// Its command name, if it was read.
        package var command: String?
        /// Where it is in its session.
        package var phase: Phase
        /// The name it gave in `HELLO`.
        package var clientName: String
        /// The flags it gave in `HELLO` (format 2; 0 when read from format 1).
        package var helloFlags: UInt32
        /// The nesting depth of its `SUSPEND`s.
        package var suspendCount: UInt32
        /// Its counters.
        package var merged: UInt64
        package var dropped: UInt64
        /// Its subscriptions, by id.
        package var subscriptions: [Subscription]
        /// Bytes owed to it and not yet written to its socket (held notifications included, in order); a frame
        /// may start part-way, where the predecessor's last write stopped.
        package var outbound: [UInt8]
        /// Notifications held while it is suspended, as frames, sent when it resumes.
        package var held: [UInt8]
        /// Bytes read from it but not yet served: the start of a frame.
        package var inbound: [UInt8]

        package init(
            cookie: UInt64, number: UInt64, credentials: SenderCredentials, groups: [UInt32], command: String?,
            phase: Phase, clientName: String, helloFlags: UInt32 = 0, suspendCount: UInt32, merged: UInt64,
            dropped: UInt64,
            subscriptions: [Subscription], outbound: [UInt8], held: [UInt8] = [], inbound: [UInt8]
        ) {
            self.cookie = cookie
            self.number = number
            self.credentials = credentials
            self.groups = groups
            self.command = command
            self.phase = phase
            self.clientName = clientName
            self.helloFlags = helloFlags
            self.suspendCount = suspendCount
            self.merged = merged
            self.dropped = dropped
            self.subscriptions = subscriptions
            self.outbound = outbound
            self.held = held
            self.inbound = inbound
        }
    }

    /// Where a connection is in its session.
    package enum Phase: UInt8, Sendable, Equatable {
        /// `HELLO` has not come yet.
        case awaitingHello = 0
        /// Requests are served.
        case open = 1
        /// A fatal error is queued for it: it closes once its bytes are written.
        case closing = 2
    }

    /// One subscription: its id, its name or pattern, its policy, and its lasting flags (states, marks-retained).
    package struct Subscription: Sendable, Equatable {
        package var id: UInt32
        package var pattern: String
        package var policy: DeliveryPolicy
        /// Made with `SUBSCRIBE`'s states flag (format 3; `false` when read from formats 1 and 2).
        package var watchesStates: Bool
        /// Made with `SUBSCRIBE`'s marks-retained flag (format 3; `false` when read from formats 1 and 2).
        package var marksRetained: Bool

        package init(
            id: UInt32, pattern: String, policy: DeliveryPolicy, watchesStates: Bool = false, marksRetained: Bool = false
        ) {
            self.id = id
            self.pattern = pattern
            self.policy = policy
            self.watchesStates = watchesStates
            self.marksRetained = marksRetained
        }
    }

    /// Creates a snapshot.
    package init(
        instanceID: InstanceID, lastSequence: UInt64, lastConnectionNumber: UInt64, counters: Counters,
        states: [State], retained: [Retained], peers: [PeerRecord]
    ) {
        self.instanceID = instanceID
        self.lastSequence = lastSequence
        self.lastConnectionNumber = lastConnectionNumber
        self.counters = counters
        self.states = states
        self.retained = retained
        self.peers = peers
    }
}
