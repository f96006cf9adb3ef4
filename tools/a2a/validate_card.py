"""Checks an A2A Agent Card (JSON on stdin) against the official A2A v1.0 definition shipped in
the `a2a-sdk` package: it must parse as `a2a.v1.AgentCard` with no unknown field and no wrongly
typed value, and every field the definition marks REQUIRED (google.api.field_behavior) must be
set, in the card and in every message inside it. Prints `valid` or the first problem; the exit
code says which."""

import json
import sys

from a2a.types.a2a_pb2 import AgentCard
from google.api import field_behavior_pb2
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor


def missing_required(message, path):
    problems = []
    for field in message.DESCRIPTOR.fields:
        behaviours = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
        required = field_behavior_pb2.FieldBehavior.REQUIRED in behaviours
        here = f"{path}.{field.json_name}"
        value = getattr(message, field.name)
        if field.is_repeated:
            if required and len(value) == 0:
                problems.append(f"{here} is required")
            if field.type != FieldDescriptor.TYPE_MESSAGE:
                continue
            if field.message_type.GetOptions().map_entry:
                entry_value = field.message_type.fields_by_name["value"]
                items = list(value.items()) if entry_value.type == FieldDescriptor.TYPE_MESSAGE else []
            else:
                items = list(enumerate(value))
            for key, item in items:
                problems += missing_required(item, f"{here}[{key}]")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if message.HasField(field.name):
                problems += missing_required(value, here)
            elif required:
                problems.append(f"{here} is required")
        elif required and value in ("", 0, False):
            problems.append(f"{here} is required")
    return problems


def main():
    card = json.load(sys.stdin)
    message = AgentCard()
    try:
        json_format.ParseDict(card, message, ignore_unknown_fields=False)
    except json_format.ParseError as error:
        print(f"not an a2a.v1.AgentCard: {error}")
        return 1
    problems = missing_required(message, "card")
    if problems:
        print("; ".join(problems))
        return 1
    print("valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
