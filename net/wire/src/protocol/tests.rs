//! The protocol's unit tests: round trips, the PROTOCOL.md examples, refusals with reasons.

use super::*;
use proptest::prelude::*;

#[test]
fn bookmarks_carry_a_short_utf8_note_and_bad_ones_are_refused() {
    for note in ["", "boids stuck in the lake", "ünïcode ✓"] {
        assert_eq!(
            decode_client(&encode_bookmark(note)),
            Ok(ClientMessage::Bookmark { note })
        );
    }
    // A long note is cut at a character boundary within the limit.
    let long = "é".repeat(BOOKMARK_NOTE_BYTES_MAX);
    let cut = encode_bookmark(&long);
    assert_eq!(cut.len(), BOOKMARK_HEADER_BYTES + BOOKMARK_NOTE_BYTES_MAX);
    assert!(
        matches!(decode_client(&cut), Ok(ClientMessage::Bookmark { note }) if note.chars().all(|c| c == 'é'))
    );
    let mut over = vec![client_type::BOOKMARK, 201];
    over.extend([b'a'; 201]);
    assert_eq!(decode_client(&over), Err(ProtocolError::NoteInvalid));
    assert_eq!(
        decode_client(&[client_type::BOOKMARK, 2, 0xc3, 0x28]),
        Err(ProtocolError::NoteInvalid)
    );
    assert!(matches!(
        decode_client(&[client_type::BOOKMARK]),
        Err(ProtocolError::BadLength { kind: "BOOKMARK", .. })
    ));
    assert!(matches!(
        decode_client(&[client_type::BOOKMARK, 5, b'a']),
        Err(ProtocolError::BadLength {
            kind: "BOOKMARK",
            expected: 7,
            actual: 3
        })
    ));
}

#[test]
fn client_messages_round_trip() {
    let hello = encode_hello(PROTOCOL_VERSION, "ada", None);
    assert_eq!(
        decode_client(&hello),
        Ok(ClientMessage::Hello {
            version: PROTOCOL_VERSION,
            name: "ada",
            options: HelloOptions::default(),
        })
    );
    assert_eq!(
        decode_client(&encode_hello_spectating(PROTOCOL_VERSION, "eye", Some(&[3; 32]))),
        Ok(ClientMessage::Hello {
            version: PROTOCOL_VERSION,
            name: "eye",
            options: HelloOptions {
                cached_terrain: Some([3; 32]),
                spectate: true,
                ..HelloOptions::default()
            },
        })
    );
    let c = CameraMsg {
        seq: 9,
        x_mm: -1,
        y_mm: 1_023_999,
    };
    assert_eq!(decode_client(&encode_camera(&c)), Ok(ClientMessage::Camera(c)));
    let cached = encode_hello(PROTOCOL_VERSION, "bo", Some(&[9; 32]));
    assert_eq!(cached.len(), HELLO_HEADER_BYTES + 2 + 32);
    assert_eq!(
        decode_client(&cached),
        Ok(ClientMessage::Hello {
            version: PROTOCOL_VERSION,
            name: "bo",
            options: HelloOptions {
                cached_terrain: Some([9; 32]),
                ..HelloOptions::default()
            },
        })
    );
    // Every combination of the options survives the round trip.
    for bits in 0u8..32 {
        let on = |b: u8| bits & b != 0;
        let o = HelloOptions {
            cached_terrain: on(1).then_some([7; 32]),
            spectate: on(2),
            want_token: on(4),
            reclaim: on(8).then_some(Reclaim {
                token: [0x5a; RECONNECT_TOKEN_BYTES],
                keeps_baselines: on(16),
            }),
        };
        let hello = encode_hello_with(PROTOCOL_VERSION, "cy", &o);
        let extra = if on(1) { 32 } else { 0 } + if on(8) { RECONNECT_TOKEN_BYTES } else { 0 };
        assert_eq!(hello.len(), HELLO_HEADER_BYTES + 2 + extra, "options {bits:05b}");
        assert_eq!(
            decode_client(&hello),
            Ok(ClientMessage::Hello {
                version: PROTOCOL_VERSION,
                name: "cy",
                options: o,
            }),
            "options {bits:05b}"
        );
    }
    let m = InputMsg {
        seq: 7,
        dir_x: -300,
        dir_y: 12,
        throttle: 100,
        cast: true,
    };
    assert_eq!(decode_client(&encode_input(&m)), Ok(ClientMessage::Input(m)));
    assert_eq!(
        decode_client(&encode_input_ack(&m, u32::MAX - 1)),
        Ok(ClientMessage::InputAck {
            input: m,
            tick: u32::MAX - 1
        })
    );
    assert_eq!(
        decode_client(&encode_ack(99)),
        Ok(ClientMessage::Ack { tick: 99 })
    );
    assert_eq!(
        decode_client(&encode_ping(u64::MAX - 3)),
        Ok(ClientMessage::Ping { nonce: u64::MAX - 3 })
    );
}

#[test]
fn the_examples_in_protocol_md() {
    assert_eq!(
        encode_hello(2, "ada", None),
        [0x10, 0x02, 0x00, 0x00, 0x03, 0x61, 0x64, 0x61]
    );
    let mut cached = vec![0x10, 0x02, 0x00, 0x01, 0x03, 0x61, 0x64, 0x61];
    cached.extend_from_slice(&[0xab; 32]);
    assert_eq!(encode_hello(2, "ada", Some(&[0xab; 32])), cached);
    let m = InputMsg {
        seq: 7,
        dir_x: -300,
        dir_y: 12,
        throttle: 100,
        cast: true,
    };
    assert_eq!(
        encode_input(&m),
        [0x11, 0x07, 0x00, 0x00, 0x00, 0xd4, 0xfe, 0x0c, 0x00, 0x64, 0x01]
    );
    assert_eq!(
        encode_input_ack(&m, 300),
        [0x16, 0x07, 0x00, 0x00, 0x00, 0xd4, 0xfe, 0x0c, 0x00, 0x64, 0x01, 0x2c, 0x01, 0x00, 0x00]
    );
    assert_eq!(
        encode_hello_spectating(2, "eye", None),
        [0x10, 0x02, 0x00, 0x02, 0x03, 0x65, 0x79, 0x65]
    );
    let c = CameraMsg {
        seq: 3,
        x_mm: 512_000,
        y_mm: -64,
    };
    assert_eq!(
        encode_camera(&c),
        [0x14, 0x03, 0x00, 0x00, 0x00, 0x00, 0xd0, 0x07, 0x00, 0xc0, 0xff, 0xff, 0xff]
    );
    let want = HelloOptions {
        want_token: true,
        ..HelloOptions::default()
    };
    assert_eq!(
        encode_hello_with(2, "ada", &want),
        [0x10, 0x02, 0x00, 0x04, 0x03, 0x61, 0x64, 0x61]
    );
    let token: ReconnectToken = std::array::from_fn(|i| i as u8);
    let reclaim = HelloOptions {
        reclaim: Some(Reclaim {
            token,
            keeps_baselines: true,
        }),
        ..HelloOptions::default()
    };
    let mut expected = vec![0x10, 0x02, 0x00, 0x18, 0x03, 0x61, 0x64, 0x61];
    expected.extend(0x00..=0x0f);
    assert_eq!(encode_hello_with(2, "ada", &reclaim), expected);
}

#[test]
fn bad_client_messages_are_named() {
    assert_eq!(decode_client(&[]), Err(ProtocolError::Empty));
    assert_eq!(decode_client(&[0x7f, 1]), Err(ProtocolError::UnknownType(0x7f)));
    // A protocol 1 HELLO (no flags byte) is refused by its version, before its layout.
    assert_eq!(
        decode_client(&[0x10, 0x01, 0x00, 0x03, 0x61, 0x64, 0x61]),
        Err(ProtocolError::UnsupportedVersion { found: 1 })
    );
    assert_eq!(
        decode_client(&encode_hello(3, "x", None)),
        Err(ProtocolError::UnsupportedVersion { found: 3 })
    );
    assert_eq!(
        decode_client(&encode_hello(PROTOCOL_VERSION, "", None)),
        Err(ProtocolError::NameInvalid)
    );
    let mut flags = encode_hello(PROTOCOL_VERSION, "x", None);
    flags[3] = 0x20;
    assert_eq!(
        decode_client(&flags),
        Err(ProtocolError::ReservedFlags {
            kind: "HELLO",
            flags: 0x20
        })
    );
    // Keeping baselines means nothing without a reclaim.
    flags[3] = HELLO_FLAG_KEEPS_BASELINES;
    assert_eq!(
        decode_client(&flags),
        Err(ProtocolError::FlagNeedsFlag {
            flag: HELLO_FLAG_KEEPS_BASELINES,
            needs: HELLO_FLAG_RECLAIM
        })
    );
    // The reclaim flag promises a token: a HELLO without one is short.
    flags[3] = HELLO_FLAG_RECLAIM;
    assert!(matches!(
        decode_client(&flags),
        Err(ProtocolError::BadLength { kind: "HELLO", .. })
    ));
    assert!(matches!(
        decode_client(&encode_camera(&CameraMsg::default())[..12]),
        Err(ProtocolError::BadLength { kind: "CAMERA", .. })
    ));
    // The cached-terrain flag promises 32 more bytes.
    let mut short = encode_hello(PROTOCOL_VERSION, "x", None);
    short[3] = HELLO_FLAG_CACHED_TERRAIN;
    assert!(matches!(
        decode_client(&short),
        Err(ProtocolError::BadLength { kind: "HELLO", .. })
    ));
    let mut long = encode_input(&InputMsg::default());
    long.push(0);
    assert!(matches!(
        decode_client(&long),
        Err(ProtocolError::BadLength { kind: "INPUT", .. })
    ));
    let mut flags = encode_input(&InputMsg::default());
    flags[10] = 0x80;
    assert_eq!(
        decode_client(&flags),
        Err(ProtocolError::ReservedFlags {
            kind: "INPUT",
            flags: 0x80
        })
    );
    // INPUT_ACK is INPUT's layout and rules with the tick after: an INPUT's length is
    // short for it, and its flags are checked as INPUT's are.
    let mut as_input_ack = encode_input(&InputMsg::default());
    as_input_ack[0] = client_type::INPUT_ACK;
    assert!(matches!(
        decode_client(&as_input_ack),
        Err(ProtocolError::BadLength {
            kind: "INPUT_ACK",
            expected: INPUT_ACK_BYTES,
            actual: INPUT_BYTES
        })
    ));
    let mut flags = encode_input_ack(&InputMsg::default(), 1);
    flags[10] = 0x02;
    assert_eq!(
        decode_client(&flags),
        Err(ProtocolError::ReservedFlags {
            kind: "INPUT_ACK",
            flags: 0x02
        })
    );
    assert_eq!(
        ProtocolError::UnsupportedVersion { found: 9 }.close_code(),
        close_code::PROTOCOL_ERROR
    );
}

fn welcome(zones: usize) -> Welcome {
    Welcome {
        protocol_version: PROTOCOL_VERSION,
        client_id: 5,
        avatar_id: 5001,
        slot: 1,
        join_tick: 40,
        tick_rate_hz: 60,
        snapshot_interval_ticks: 3,
        world_size_mm: 1_024_000,
        terrain: WireTerrainDescriptor {
            cells: 1024,
            cell_size_mm: 1000,
            dtype: 1,
            compression: 2,
            delivery: TerrainDelivery::Chunked,
            chunk_count: 4,
            total_bytes: 123_456_789_012,
            content_hash: [7; 32],
        },
        world: WorldFacts {
            view_radius_mm: 50_000,
            view_entities_max: 128,
            baseline_window_snapshots: 16,
            cast_radius_mm: 6_000,
            cast_cooldown_ticks: 30,
            avatar_speed_max_mm_per_tick: 150,
            zones: (0..zones)
                .map(|i| WireZone {
                    kind: if i == 0 {
                        ZoneKind::Town
                    } else {
                        ZoneKind::HuntingField
                    },
                    x_mm: 1000 * i as u32 + 1,
                    y_mm: 2000 * i as u32 + 2,
                    radius_mm: 40_000 + i as u32,
                })
                .collect(),
        },
        reconnect_token: None,
    }
}

#[test]
fn server_messages_round_trip() {
    for zones in [0, 1, 5, welcome_layout::ZONE_COUNT_MAX] {
        let w = welcome(zones);
        let b = encode_welcome(&w);
        assert_eq!(b.len(), welcome_bytes(zones));
        assert_eq!(decode_server(&b), Ok(ServerMessage::Welcome(w.clone())));
        // Cut or padded by one byte, it is refused by length.
        for bad in [&b[..b.len() - 1], &[b.as_slice(), &[0]].concat()[..]] {
            assert!(
                matches!(
                    decode_server(bad),
                    Err(ServerMessageError::BadLength { kind: "WELCOME", .. })
                ),
                "{zones} zones"
            );
        }
    }
    // A token adds its 16 bytes at the very end; nothing before it moves.
    let with_token = Welcome {
        reconnect_token: Some(*b"0123456789abcdef"),
        ..welcome(4)
    };
    let b = encode_welcome(&with_token);
    assert_eq!(b.len(), welcome_bytes(4) + RECONNECT_TOKEN_BYTES);
    assert_eq!(&b[..welcome_bytes(4)], &encode_welcome(&welcome(4))[..]);
    assert_eq!(&b[welcome_bytes(4)..], b"0123456789abcdef");
    assert_eq!(decode_server(&b), Ok(ServerMessage::Welcome(with_token)));
    let cached = Welcome {
        terrain: welcome(1).terrain.cached(),
        ..welcome(1)
    };
    let b = encode_welcome(&cached);
    assert_eq!(b[welcome_layout::TERRAIN_DELIVERY], TerrainDelivery::Cached as u8);
    assert_eq!(decode_server(&b), Ok(ServerMessage::Welcome(cached)));
    let mut bad = encode_welcome(&welcome(2));
    bad[welcome_layout::TERRAIN_DELIVERY] = 3;
    assert_eq!(
        decode_server(&bad),
        Err(ServerMessageError::BadField {
            field: "terrain.delivery",
            value: 3
        })
    );
    let mut bad = encode_welcome(&welcome(2));
    bad[welcome_layout::ZONES + welcome_layout::ZONE_BYTES + 1] = 1;
    assert_eq!(
        decode_server(&bad),
        Err(ServerMessageError::BadField {
            field: "zone.shape",
            value: 1
        })
    );
    let p = encode_pong(42, 1000);
    assert_eq!(
        decode_server(&p),
        Ok(ServerMessage::Pong {
            nonce: 42,
            server_tick: 1000
        })
    );
    let mut snapshot = vec![1u8; 17];
    snapshot[1..5].copy_from_slice(&77u32.to_le_bytes());
    let s = encode_snapshot(&snapshot);
    assert_eq!(
        decode_server(&s),
        Ok(ServerMessage::Snapshot {
            tick: 77,
            snapshot: &snapshot
        })
    );
}

proptest! {
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = decode_client(&bytes);
        let _ = decode_server(&bytes);
    }
}
