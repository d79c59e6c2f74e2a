use super::*;

/// A frame source that takes everything and records the kinds.
struct Take(Vec<Kind>);
impl FrameSource for Take {
    fn room(&self) -> bool {
        true
    }
    fn emit(&mut self, d: &TxDesc) -> Emit {
        self.0.push(d.kind);
        Emit::Sent
    }
}

#[test]
fn control_and_messages_go_ahead_of_bulk_data_in_their_own_order() {
    let mut s: Stream<()> = Stream::default();
    for _ in 0..100 {
        s.queue(TxDesc::new(Kind::PullData, 1));
    }
    s.queue(TxDesc::new(Kind::Small, 0));
    s.queue(TxDesc::new(Kind::Pull, 2));
    s.queue(TxDesc::new(Kind::Rts, 3));
    s.queue(TxDesc::new(Kind::Fin, 4));
    let mut out = Take(Vec::new());
    s.transmit(&mut out, 0, 1024, false);
    assert_eq!(
        &out.0[..4],
        &[Kind::Pull, Kind::Fin, Kind::Small, Kind::Rts],
        "control, then messages in order, then bulk"
    );
    assert!(out.0[4..].iter().all(|&k| k == Kind::PullData));
    assert_eq!(out.0.len(), 104);
    // Sequence numbers follow the order sent.
    let seqs: Vec<u32> = s.q.unacked.iter().map(|d| d.seq).collect();
    assert_eq!(seqs, (0..104).collect::<Vec<u32>>());
}

#[test]
fn a_reply_to_an_earlier_probe_resends_nothing_sent_since() {
    let mut s: Stream<()> = Stream::default();
    let mut out = Take(Vec::new());
    for _ in 0..4 {
        s.queue(TxDesc::new(Kind::Small, 0));
    }
    s.transmit(&mut out, 100, 1024, false); // seq 0..4 at t = 100
    // Probe 1 at t = 200; then four more frames; then probe 2 at t = 400.
    (s.probe_id, s.last_rto) = (1, 200);
    for _ in 0..4 {
        s.queue(TxDesc::new(Kind::Small, 0));
    }
    s.transmit(&mut out, 300, 1024, false); // seq 4..8 at t = 300
    (s.probe_id, s.last_rto) = (2, 400);
    let mut done = Vec::new();
    // The reply to probe 1: the receiver had seq 0..4 then; 4..8 are on their way.
    s.on_ack(4, None, Some(1), 500, 1_000_000, &mut done);
    assert_eq!(s.q.unacked.len(), 4, "seq 0..4 acknowledged");
    assert!(
        s.q.resend.is_empty(),
        "frames sent after probe 1 are not lost"
    );
    // The reply to probe 2 with the same ack: 4..8 were sent before it, so lost.
    s.on_ack(4, None, Some(2), 600, 1_000_000, &mut done);
    assert_eq!(s.q.resend.iter().copied().collect::<Vec<_>>(), [4, 5, 6, 7]);
    // A second reply does not queue them twice.
    s.on_ack(4, None, Some(2), 700, 1_000_000, &mut done);
    assert_eq!(s.q.resend.len(), 4);
}

#[test]
fn an_ack_samples_the_newest_frame_it_acknowledges_that_went_out_once() {
    let mut out = Take(Vec::new());
    for (retried_last, want) in [(false, 700), (true, 800)] {
        let mut s: Stream<()> = Stream::default();
        // Sent short of credit: each asks for its ack at once (FLAG_ACK_NOW).
        for t in [100, 200, 300] {
            s.queue(TxDesc::new(Kind::Small, 0));
            s.transmit(&mut out, t, 1024, true);
        }
        if retried_last {
            s.q.unacked[2].retries = 1;
        }
        let mut done = Vec::new();
        s.on_ack(3, None, None, 1_000, 1_000_000, &mut done);
        assert!(s.q.unacked.is_empty());
        assert_eq!(s.rtt.srtt(), want, "last frame retried: {retried_last}");
    }
    // The newest frame did not ask for its ack at once: the receiver may have held the ack
    // (up to the delay it advertised), so it is no round-trip sample.
    let mut s: Stream<()> = Stream::default();
    s.queue(TxDesc::new(Kind::Small, 0));
    s.transmit(&mut out, 100, 1024, true);
    s.queue(TxDesc::new(Kind::Small, 0));
    s.transmit(&mut out, 200, 1024, false);
    assert_eq!(
        s.q.unacked[0].flags & wire::FLAG_ACK_NOW,
        wire::FLAG_ACK_NOW
    );
    assert_eq!(s.q.unacked[1].flags & wire::FLAG_ACK_NOW, 0);
    s.on_ack(2, None, None, 5_000, 1_000_000, &mut Vec::new());
    assert_eq!(s.rtt.srtt(), 0);
    // Nothing sent after the last timeout: no sample.
    let mut s: Stream<()> = Stream::default();
    s.queue(TxDesc::new(Kind::Small, 0));
    s.transmit(&mut out, 100, 1024, true);
    s.last_rto = 150;
    s.on_ack(1, None, None, 1_000, 1_000_000, &mut Vec::new());
    assert_eq!(s.rtt.srtt(), 0);
}

#[test]
fn a_frame_without_a_buffer_keeps_its_place() {
    struct Once(bool, Vec<Kind>);
    impl FrameSource for Once {
        fn room(&self) -> bool {
            true
        }
        fn emit(&mut self, d: &TxDesc) -> Emit {
            if !self.0 {
                self.0 = true;
                return Emit::NoBuffer;
            }
            self.1.push(d.kind);
            Emit::Sent
        }
    }
    let mut s: Stream<()> = Stream::default();
    s.queue(TxDesc::new(Kind::PullData, 1));
    s.queue(TxDesc::new(Kind::Grant, 2));
    s.queue(TxDesc::new(Kind::Pull, 3));
    let mut src = Once(false, Vec::new());
    s.transmit(&mut src, 0, 1024, false);
    s.transmit(&mut src, 0, 1024, false);
    assert_eq!(src.1, [Kind::Grant, Kind::Pull, Kind::PullData]);
}

#[test]
fn frames_that_fill_the_window_and_resends_ask_for_their_ack_at_once() {
    let mut s: Stream<()> = Stream::default();
    let mut out = Take(Vec::new());
    for _ in 0..8 {
        s.queue(TxDesc::new(Kind::Small, 0));
    }
    s.transmit(&mut out, 100, 8, false);
    let flagged: Vec<u32> =
        s.q.unacked
            .iter()
            .filter(|d| d.flags & wire::FLAG_ACK_NOW != 0)
            .map(|d| d.seq)
            .collect();
    // The 6th frame fills three quarters of a window of 8, the 8th all of it.
    assert_eq!(flagged, [5, 7]);
    // A resend asks for its ack at once.
    struct Flags(Vec<u16>);
    impl FrameSource for Flags {
        fn room(&self) -> bool {
            true
        }
        fn emit(&mut self, d: &TxDesc) -> Emit {
            self.0.push(d.flags);
            Emit::Sent
        }
    }
    s.q.unacked[1].queued = true;
    s.q.resend.push_back(1);
    let mut src = Flags(Vec::new());
    s.transmit(&mut src, 200, 8, false);
    assert_eq!(src.0, [wire::FLAG_ACK_NOW]);
}

/// The retransmit timer allows for the receiver holding the ack (the delay it advertised)
/// of a frame that did not ask for it at once, not for one that did; once a probe is out,
/// it backs off from the round-trip bound alone (a probe is answered at once).
#[test]
fn the_retransmit_timeout_allows_for_a_held_ack() {
    let cfg = Config::default();
    let d = 5_000_000;
    for (low_credit, fires) in [(false, cfg.rto_initial_ns + d), (true, cfg.rto_initial_ns)] {
        let mut s: Stream<()> = Stream::default();
        s.set_peer_ack_delay(5_000);
        s.queue(TxDesc::new(Kind::Small, 0));
        s.transmit(&mut Take(Vec::new()), 0, 1024, low_credit);
        assert!(!s.rto_scan(fires - 1, &cfg, u64::MAX).fired);
        assert!(s.rto_scan(fires, &cfg, u64::MAX).fired);
        // The probe goes out: the next expiry is twice the round-trip bound later.
        (s.probe, s.last_rto) = (false, fires);
        let again = fires + 2 * cfg.rto_initial_ns;
        assert!(!s.rto_scan(again - 1, &cfg, u64::MAX).fired);
        assert!(s.rto_scan(again, &cfg, u64::MAX).fired);
    }
}
