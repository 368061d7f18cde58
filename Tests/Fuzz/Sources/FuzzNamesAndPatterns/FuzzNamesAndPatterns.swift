// Fuzzes the name and pattern grammar: NotificationName.validate / isValid / isProcessLocal,
// NotificationPattern(_:maxLength:) and matches(_:), ExactName.
//
// Input: byte 0 chooses the length limit (255, or byte % 64 + 1 when bit 7 is set); the rest is split at its
// first 0x00 byte into a pattern and a name (UTF-8; invalid sequences become U+FFFD, which the grammar
// rejects). The name also supplies labels to fill the pattern's wildcards with.
// Properties, against a reference written from protocol/PROTOCOL.md § 8 (labels split at every "." scalar,
// compared byte for byte):
// - validate agrees with the reference grammar, isValid with validate, and every NameError describes itself;
// - a pattern parses exactly when every label is "*", ">" (last only) or a valid label and it fits the limit;
//   its labels, hasWildcards and literalPrefix agree with its text;
// - matches(name) agrees with a reference matcher, and a name built from the pattern by filling its wildcards
//   with valid labels always matches;
// - ExactName equality is byte equality and equal names hash alike.
import FuzzSupport
import NotifyWire

@main
enum FuzzNamesAndPatterns {
    static func main() {
        fuzz(FuzzNamesAndPatterns.testOneInput)
    }

    static func labels(_ text: String) -> [[UInt8]] {
        var result: [[UInt8]] = [[]]
        for scalar in text.unicodeScalars {
            if scalar == "." {
                result.append([])
            } else {
                result[result.count - 1] += Array(String(scalar).utf8)
            }
        }
        return result
    }

    static func isAllowed(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        if value < 0x80 {
            let ascii = UInt8(value)
            return (ascii >= 0x30 && ascii <= 0x39) || (ascii >= 0x41 && ascii <= 0x5A) || (ascii >= 0x61 && ascii <= 0x7A)
                || "-_:@+=".utf8.contains(ascii)
        }
        if value < 0xA0 { return false }
        if value & 0xFFFF >= 0xFFFE { return false }
        return !NameCharacters.invisibleRanges.contains { $0.contains(value) }
    }

    static func isValidLabel(_ label: [UInt8]) -> Bool {
        guard !label.isEmpty, let text = String(validating: label, as: UTF8.self) else { return false }
        return text.unicodeScalars.allSatisfy { $0 != "." && isAllowed($0) }
    }

    static func referenceIsValidName(_ name: String, maxLength: Int) -> Bool {
        let count = name.utf8.count
        return count >= 1 && count <= maxLength && labels(name).allSatisfy(isValidLabel)
    }

    static func referenceIsValidPattern(_ text: String, maxLength: Int) -> Bool {
        let parts = labels(text)
        let count = text.utf8.count
        guard count >= 1 && count <= maxLength else { return false }
        for (index, part) in parts.enumerated() {
            if part == [UInt8(ascii: "*")] { continue }
            if part == [UInt8(ascii: ">")] { if index == parts.count - 1 { continue } else { return false } }
            if !isValidLabel(part) { return false }
        }
        return true
    }

    static func referenceMatches(_ pattern: [[UInt8]], _ name: [[UInt8]]) -> Bool {
        var index = 0
        for label in pattern {
            if label == [UInt8(ascii: ">")] { return index < name.count }
            guard index < name.count else { return false }
            if label != [UInt8(ascii: "*")] && label != name[index] { return false }
            index += 1
        }
        return index == name.count
    }

    static func testOneInput(_ input: UnsafeRawBufferPointer) {
        guard let first = input.first else { return }
        let maxLength = first & 0x80 != 0 ? Int(first % 64) + 1 : NotificationName.maxLength
        let rest = input.dropFirst()
        let split = rest.firstIndex(of: 0) ?? rest.endIndex
        let patternText = String(decoding: rest[rest.startIndex..<split], as: UTF8.self)
        let nameText = split < rest.endIndex
            ? String(decoding: rest[(split + 1)...], as: UTF8.self) : patternText

        // Names.
        for name in [nameText, patternText] {
            let expected = referenceIsValidName(name, maxLength: maxLength)
            var thrown: NameError?
            do { try NotificationName.validate(name, maxLength: maxLength) } catch { thrown = error }
            require((thrown == nil) == expected, "validate(\(name.debugDescription), \(maxLength)): \(String(describing: thrown)), reference says valid=\(expected)")
            require(NotificationName.isValid(name, maxLength: maxLength) == expected, "isValid disagrees with validate for \(name.debugDescription)")
            if let thrown {
                _ = thrown.description
                switch thrown {
                case .invalidCharacter(_, let character):
                    require(!isAllowed(character) && name.unicodeScalars.contains(character), "invalidCharacter \(character.value) for \(name.debugDescription)")
                case .emptyLabel(_, let index):
                    let parts = labels(name)
                    require(index < parts.count && parts[index].isEmpty, "emptyLabel(\(index)) for \(name.debugDescription)")
                case .tooLong(_, let length, let limit):
                    require(length == name.utf8.count && length > limit && limit == maxLength, "tooLong(\(length), \(limit)) for \(name.debugDescription)")
                case .empty:
                    require(name.isEmpty, "empty for \(name.debugDescription)")
                case .misplacedRest:
                    require(false, "misplacedRest from a name")
                }
            }
            require(
                NotificationName.isProcessLocal(name) == name.utf8.starts(with: "self.".utf8),
                "isProcessLocal(\(name.debugDescription))")
        }

        // ExactName.
        let a = ExactName(patternText), b = ExactName(nameText)
        let bytesEqual = patternText.utf8.elementsEqual(nameText.utf8)
        require((a == b) == bytesEqual, "ExactName equality \(a == b) but bytes equal \(bytesEqual)")
        if a == b { require(a.hashValue == b.hashValue, "equal ExactNames hash differently") }

        // Patterns.
        let expectedPattern = referenceIsValidPattern(patternText, maxLength: maxLength)
        let pattern: NotificationPattern
        do {
            pattern = try NotificationPattern(patternText, maxLength: maxLength)
        } catch {
            _ = error.description
            require(!expectedPattern, "pattern \(patternText.debugDescription) (limit \(maxLength)) rejected: \(error)")
            return
        }
        require(expectedPattern, "pattern \(patternText.debugDescription) (limit \(maxLength)) accepted, reference rejects it")
        let patternLabels = labels(patternText)
        require(pattern.text.utf8.elementsEqual(patternText.utf8), "pattern text changed")
        require(pattern.labels.count == patternLabels.count, "\(pattern.labels.count) labels, expected \(patternLabels.count)")
        var hasWildcards = false
        var literalPrefix: [[UInt8]] = []
        var inPrefix = true
        for (label, expected) in zip(pattern.labels, patternLabels) {
            switch label {
            case .anyLabel:
                require(expected == [UInt8(ascii: "*")], "anyLabel for \(hex(expected))")
                hasWildcards = true
                inPrefix = false
            case .rest:
                require(expected == [UInt8(ascii: ">")], "rest for \(hex(expected))")
                hasWildcards = true
                inPrefix = false
            case .literal(let literal):
                require(Array(literal.utf8) == expected, "literal \(hex(literal.utf8)) for \(hex(expected))")
                if inPrefix { literalPrefix.append(expected) }
            }
        }
        require(pattern.hasWildcards == hasWildcards, "hasWildcards")
        require(
            Array(pattern.literalPrefix.utf8) == Array(literalPrefix.joined(separator: [UInt8(ascii: ".")])),
            "literalPrefix \(pattern.literalPrefix.debugDescription)")

        // Matching a name from the input.
        if NotificationName.isValid(nameText) {
            let expected = referenceMatches(patternLabels, labels(nameText))
            require(
                pattern.matches(nameText) == expected,
                "\(patternText.debugDescription) matches \(nameText.debugDescription): \(!expected), reference says \(expected)")
        }

        // A name built from the pattern: wildcards filled with the name's valid labels (or "x").
        var fillers = labels(nameText).filter(isValidLabel)
        if fillers.isEmpty { fillers = [[UInt8(ascii: "x")]] }
        var built: [[UInt8]] = []
        var fillerIndex = 0
        for label in patternLabels {
            if label == [UInt8(ascii: "*")] {
                built.append(fillers[fillerIndex % fillers.count])
                fillerIndex += 1
            } else if label == [UInt8(ascii: ">")] {
                let count = 1 + fillers.count % 3
                for _ in 0..<count {
                    built.append(fillers[fillerIndex % fillers.count])
                    fillerIndex += 1
                }
            } else {
                built.append(label)
            }
        }
        let builtName = String(decoding: Array(built.joined(separator: [UInt8(ascii: ".")])), as: UTF8.self)
        if NotificationName.isValid(builtName) {
            require(pattern.matches(builtName), "\(patternText.debugDescription) does not match \(builtName.debugDescription), built from it")
        }
    }
}
