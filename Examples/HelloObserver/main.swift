// Observes com.example.hello and prints each notification from a dispatch queue of its own.
// Run the daemon (`make run`), then this (`swift run hello-observer`), then
// `notifyctl post com.example.hello hi` in another terminal.
import Dispatch
import Notify

let center = try await NotifyCenter.connect()
let queue = DispatchQueue(label: "hello-observer")

let observation = try center.observe("com.example.hello", on: .queue(queue)) { notification in
    dispatchPrecondition(condition: .onQueue(queue))  // the handler runs on the queue we chose
    print("\(notification.name) from pid \(notification.sender.pid): \(notification.payloadString ?? "<binary>")")
}
try await center.synchronize()  // the daemon has our subscription now
print("observing com.example.hello; try: notifyctl post com.example.hello hi")

while !observation.isCancelled {
    try await Task.sleep(nanoseconds: 3_600_000_000_000)
}
