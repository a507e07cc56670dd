"""Small standards written for the structure-aware retrieval tests (kept out of pytest collection)."""

TOY_TRANSPORT = """---
title: Toy Transport
number: 9990
normative:
  TOY-RECOVERY:
    title: "Toy Recovery"
    seriesinfo:
      RFC: 9991
  TLS13: RFC8446
---

--- abstract

Toy abstract about a transport.

--- middle

# Overview

Overview text; see {{frames}} and {{Section 2 of TOY-RECOVERY}}.

## Streams {#streams}

Streams carry ordered bytes. See {{frame-ack}}.

~~~
# not a heading, a code comment
~~~

### Stream States

States are explained in {{TLS13}} and {{Section 3 of NOPE}}.

# Frames {#frames}

## ACK Frames {#frame-ack}

ACK frames acknowledge packets. See {{streams}}.

--- back

# Extra Notes

Notes.
"""

TOY_RECOVERY = """---
title: Toy Recovery
number: 9991
---

--- middle

# Intro

Intro to recovery.

# Loss Detection {#loss}

Loss is detected per packet number space; see {{!TOY-TRANSPORT=RFC9990}}.
"""

ETSI_TEXT = """ETSI EN 300 999 V1.1.1

1 Scope
The present document covers toy radios.

2 References
[1] ETSI EN 301 489-1: "EMC standard".

3 Definitions
3.1 Terms
For the purposes of clause 4.1 the following terms apply:
1. Radio: a device that emits.
2. Toy: a device for play.

4 Requirements
4.1 Power
Power shall not exceed the limits of clause 5.2 of [1].
4.1.1 Measurement
Power is measured as in Annex A.

Annex A (normative): Test methods
A.1 Set-up
The set-up uses a shielded room.
"""
