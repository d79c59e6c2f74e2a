//! A peer that keeps sending owes a delayed ack nearly all the time; the engine visits it
//! again when that ack falls due (or the link goes quiet), not on every transmit pass before:
//! the ack still goes out on time, exactly once, and an idle loop's sleep budget still wakes
//! it for that ack.

mod common;
use common::{MemEng as Eng, mem_engine};
use tigon_engine::matching::match_bits;
use tigon_engine::memlink::{self, MemLink};
use tigon_engine::wire::MacAddr;
use tigon_engine::*;

struct Two {
    a: Eng,
    la: MemLink,
    b: Eng,
    lb: MemLink,
    now: u64,
}

impl Two {
    fn new() -> Two {
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let (la, lb) = memlink::pair(ma, mb, 1514, 256);
        Two {
            a: mem_engine(ma),
            la,
            b: mem_engine(mb),
            lb,
            now: 1_000,
        }
    }

    /// B sends one 8-byte message to A's endpoint 0, which A has a receive posted for.
    fn send(&mut self, k: u64) {
        let dst = EndpointAddr::new(self.a.mac(), 0);
        let sb = self.b.copy_engine_mut().mem.insert(vec![k as u8; 8]);
        self.b
            .isend(0, dst, match_bits(1, 0), 7, sb, SendMode::Standard)
            .unwrap();
        let ra = self.a.copy_engine_mut().mem.insert(vec![0; 8]);
        self.a.irecv(0, MatchSpec::mpi(1, 7, 0), ra).unwrap();
    }

    /// A frame for A that is none of the engine's (another protocol's): A's loop receives
    /// something, so it is busy, and B's stream is left alone.
    fn other_traffic(&mut self) {
        let mut b = self.lb.alloc_tx(60).unwrap();
        let f: &mut [u8] = b.as_mut();
        f.fill(0);
        f[..6].copy_from_slice(&self.a.mac().0);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        self.lb.tx_burst(&mut vec![b]);
    }

    /// Time moves `dt` on; B polls (its frames go out), then A.
    fn step(&mut self, dt: u64) {
        self.now += dt;
        self.b.poll(&mut self.lb, self.now);
        self.a.poll(&mut self.la, self.now);
        while let Some(c) = self.a.pop_completion() {
            assert!(c.result.is_ok(), "{c:?}");
        }
    }
}

#[test]
fn a_delayed_ack_goes_out_when_due_once_and_the_sleep_budget_knows_it() {
    let mut t = Two::new();
    let cfg = Config::default();
    let (delay, quiet) = (cfg.max_ack_delay_ns, cfg.ack_idle_ns);
    assert!(quiet < delay && cfg.ack_every > 8);
    // The connection, and every ack of its set-up, out of the way.
    t.send(0);
    for _ in 0..100 {
        t.step(10_000);
    }
    while let Some(c) = t.b.pop_completion() {
        assert!(c.result.is_ok(), "{c:?}");
    }
    let acks = t.a.stats.acks_sent;
    // After a long silence, a message every 2 us, fewer than `ack_every` of them: the first
    // opens the delay (a quiet peer's ack waits as any other's, wire version 7), and A's loop
    // stays busy (a frame received by every poll: the link is never quiet for
    // `ack_idle_ns`) until the delay, `max_ack_delay_ns`, is over.
    let first = t.now + 2_000;
    let mut sent = 0;
    while t.now + 2_000 < first + delay {
        if sent < 8 {
            t.send(2 + sent);
            sent += 1;
        } else {
            t.other_traffic();
        }
        t.step(2_000);
        assert_eq!(
            t.a.stats.acks_sent,
            acks,
            "ack sent {} ns into its delay",
            t.now - first
        );
        // Nothing else is due before that ack: the loop may sleep until then, no longer.
        let budget = t.a.sleep_budget_ns(t.now);
        assert!(
            budget <= first + delay - t.now,
            "sleep budget {budget} ns at {} ns into the delay",
            t.now - first
        );
    }
    assert!(sent < cfg.ack_every as u64);
    // Due: the next pass sends it, one ack for all of them.
    t.step(2_000);
    assert_eq!(
        t.a.stats.acks_sent,
        acks + 1,
        "the delayed ack went out when due"
    );
    // Every message acknowledged: B's sends complete, and nothing more is owed.
    for _ in 0..10 {
        t.step(1_000);
    }
    let mut done = 0;
    while let Some(c) = t.b.pop_completion() {
        assert!(c.result.is_ok(), "{c:?}");
        done += 1;
    }
    assert_eq!(done, sent);
    assert_eq!(t.a.stats.acks_sent, acks + 1, "no ack owed after");
    assert_eq!(t.a.sleep_budget_ns(t.now), u64::MAX, "nothing timed at A");
    assert_eq!(t.b.stats.retransmits, 0);

    // Once the link goes quiet, an ack owed goes out after `ack_idle_ns`, before its delay.
    t.send(100);
    t.step(1_000);
    t.send(101);
    t.step(2_000);
    let owed = t.now;
    let acks = t.a.stats.acks_sent;
    while t.a.stats.acks_sent == acks {
        assert!(
            t.now < owed + quiet + 3_000,
            "no ack once the link was quiet"
        );
        t.step(1_000);
    }
    assert!(t.now < owed + delay);
}
