//! The client against a fake agent: a channel in a memfd region whose agent side the test
//! plays through its own `Channel`, answering requests as a broken or hostile agent could.
//! Whatever comes back, the rank gets an error that says what happened, and loses no buffer.

use crate::pending::Inner;
use crate::{Client, Done, Error, RecvInto};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use tigon_engine::channel::{Channel, Completion, Geometry, Payload, Request, status};
use tigon_engine::{Dest, EndpointAddr, MatchSpec, SendMode};
use tigon_shm::Region;
use tigon_shm::wake::EventFd;

const GEO: Geometry = Geometry {
    n_desc: 16,
    n_data: 4,
    data_size: 1024,
};

struct Fake {
    agent: Channel,
    client: Client,
    /// The agent's end of the control socket: open, so the client sees a live agent.
    _sock: UnixStream,
}

/// A client that maps no receive memory of the agent's (as one whose agent lends nothing).
fn fake() -> Fake {
    let region = Arc::new(Region::create("tigon-client-test", GEO.len(), false).unwrap());
    let me = std::process::id();
    let agent = Channel::init(region.clone(), GEO, me, me).unwrap();
    let ch = Channel::open(Arc::new(
        Region::from_fd(region.fd().try_clone().unwrap(), GEO.len()).unwrap(),
    ))
    .unwrap();
    let (sock, peer) = UnixStream::pair().unwrap();
    sock.set_nonblocking(true).unwrap();
    let inner = Inner::new(ch, EventFd::new().unwrap(), sock, None);
    let addr: EndpointAddr = "02:00:00:00:00:01/1".parse().unwrap();
    let client = Client::new(inner, Dest::from(addr), addr.to_string(), 1024, me as i32);
    Fake {
        agent,
        client,
        _sock: peer,
    }
}

/// An agent that lends the frame of a small message to a client that cannot read the
/// agent's receive memory (it asked for no lease): the receive's payload is an error naming
/// that, and both the data buffer and the lent frame go back.
#[test]
fn a_frame_lent_to_a_client_that_cannot_read_it_is_an_error() {
    let f = fake();
    let spec = MatchSpec::mpi(0, 1, 5);
    let (r, in_channel) = f
        .client
        .irecv_or_lease(spec, 64, RecvInto::Vec(vec![0; 64]))
        .unwrap();
    assert!(in_channel, "a small receive goes through a data buffer");
    let (idx, sub) = f.agent.take_request().unwrap().unwrap();
    let sub = sub.unwrap();
    assert!(
        matches!(
            sub.request,
            Request::Recv {
                payload: Payload::Buffer { len: 64, .. },
                ..
            }
        ),
        "no lease asked for: {:?}",
        sub.request
    );
    let lent = Completion {
        user: sub.user,
        status: status::OK,
        info_rank: 1,
        info_len: 8,
        received: 8,
        lease: 1 + 7,
        lease_off: 4096,
        ..Completion::default()
    };
    assert_eq!(f.agent.publish(&[lent.entry(idx)]), Ok(1));
    let Done::ReceivedInChannel { lease, status } = f.client.wait(r).unwrap() else {
        panic!("a receive through a data buffer completes in the channel");
    };
    assert_eq!((status.source, status.received), (1, 8));
    let mut dst = [0u8; 8];
    let e = f.client.take_lease(&lease, Some(&mut dst)).unwrap_err();
    assert!(
        matches!(&e, Error::Failed { status: s, message } if *s == status::INVALID
            && message.contains("cannot read")),
        "{e}"
    );
    assert_eq!(
        f.agent.leases.pop(),
        Ok(Some(7)),
        "the lent frame given back"
    );
    // Every data buffer is free again: as many channel receives as there are buffers fit.
    for _ in 0..GEO.n_data {
        let (_, in_channel) = f
            .client
            .irecv_or_lease(spec, 64, RecvInto::Vec(vec![0; 64]))
            .unwrap();
        assert!(in_channel);
    }
}

/// A completion for a descriptor with nothing pending, or with the tag of another
/// submission: the agent is broken, and every call from then on says so.
#[test]
fn a_completion_nothing_waits_for_ends_the_client_with_a_clear_error() {
    let peer: EndpointAddr = "02:00:00:00:00:02/1".parse().unwrap();
    let f = fake();
    assert_eq!(
        f.agent.publish(&[Completion::status(status::OK).entry(3)]),
        Ok(1)
    );
    f.client.progress();
    let e = f
        .client
        .isend(peer, 0, 0, b"x", SendMode::Standard)
        .unwrap_err();
    assert!(
        matches!(&e, Error::AgentGone(m) if m.contains("descriptor 3, which was not pending")),
        "{e}"
    );

    let f = fake();
    let r = f
        .client
        .isend(peer, 0, 0, b"x", SendMode::Standard)
        .unwrap();
    let (idx, sub) = f.agent.take_request().unwrap().unwrap();
    let stale = Completion {
        user: sub.unwrap().user.wrapping_add(1),
        ..Completion::status(status::OK)
    };
    assert_eq!(f.agent.publish(&[stale.entry(idx)]), Ok(1));
    let e = f.client.wait(r).unwrap_err();
    assert!(
        matches!(&e, Error::AgentGone(m) if m.contains("not pending")),
        "{e}"
    );
}
