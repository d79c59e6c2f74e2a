/*
 * The C side of mca_mtl_tigon: Open MPI 4.1's static inline functions and macros, which Rust
 * cannot call, wrapped as plain functions. Everything here is a thin forwarder; the logic
 * lives in Rust (src/).
 */
#ifndef TIGON_MTL_SHIM_H
#define TIGON_MTL_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ompi_communicator_t;
struct ompi_proc_t;
struct opal_convertor_t;
struct ompi_message_t;
struct ompi_status_public_t;
struct mca_mtl_request_t;

/* MCA parameters (storage owned by the shim; Open MPI writes the values). The numbers are
   registered as strings and parsed, range-checked, by the component (src/params.rs): an int
   variable would turn "abc" into 0 without a word. */
struct tigon_params {
    const char *priority;
    const char *verbose;
    /* Agent control socket; "" means $TIGON_SOCKET, else /run/tigon/agent.sock. */
    const char *socket;
    /* Informational: the agent's eager limit, filled in at init. */
    int eager_limit;
    /* Send/receive buffers up to this size go through channel buffers (0: the agent's size). */
    const char *channel_threshold;
    /* Milliseconds MPI_Finalize waits for sends still in flight. */
    const char *finalize_timeout_ms;
    /* Waiting: nap after this many microseconds without a completion instead of yielding
       (when Open MPI would yield); -1: leave Open MPI's sched_yield. */
    const char *nap_after_us;
    /* Yielding waits: poll this many nanoseconds after a send to this host before yielding. */
    const char *spin_after_send_ns;
};

/* Registers the component's MCA variables; returns an OMPI status. */
int tigon_register_params(void);
const struct tigon_params *tigon_params(void);
void tigon_set_eager_limit(int bytes);
/* Opens the component's output stream at the `verbose` level. */
void tigon_output_open(int verbose);
void tigon_output_close(void);
/* opal_output_verbose on the component's stream. */
void tigon_output(int level, const char *msg);
/* Prints a message of help-mtl-tigon.txt (found next to the component .so), or `fallback`
   when the help file cannot be found. */
void tigon_show_help(const char *topic, const char *fallback, const char *a1, const char *a2);
/* Whether the `mtl` selection names tigon (e.g. `--mca mtl tigon`); and whether `pml` is cm. */
bool tigon_mtl_requested(void);
bool tigon_pml_cm_requested(void);
/* This process: its MPI_COMM_WORLD rank (-1 if unknown) and host name. */
int tigon_world_rank(void);
const char *tigon_hostname(void);

/* Modex: publish this endpoint's address / fetch a peer's (malloc'd, free with free()). */
int tigon_modex_send(const void *data, size_t size);
int tigon_modex_recv(struct ompi_proc_t *proc, void **data, size_t *size);

/* Communicators and processes. */
uint32_t tigon_comm_cid(const struct ompi_communicator_t *comm);
int tigon_comm_rank(const struct ompi_communicator_t *comm);
int tigon_comm_remote_size(const struct ompi_communicator_t *comm);
struct ompi_proc_t *tigon_comm_peer(struct ompi_communicator_t *comm, int rank);
void *tigon_proc_endpoint(const struct ompi_proc_t *proc);
void tigon_proc_set_endpoint(struct ompi_proc_t *proc, void *endpoint);
/* "[[jobid,vpid],host]"-style name for messages (static buffer of Open MPI's). */
const char *tigon_proc_name(const struct ompi_proc_t *proc);
const char *tigon_proc_host(const struct ompi_proc_t *proc);
/* 1 when the process runs on this host (Open MPI's locality), else 0. */
int tigon_proc_on_this_host(const struct ompi_proc_t *proc);

/* Datatypes through the convertor (ompi_mtl_datatype_*). */
int tigon_pack(struct opal_convertor_t *conv, void **buf, size_t *len, bool *free_after);
int tigon_recv_buf(struct opal_convertor_t *conv, void **buf, size_t *len, bool *free_after);
/* Unpacks `len` received bytes from `buf` (when it is a bounce buffer) and frees it. */
int tigon_unpack(struct opal_convertor_t *conv, void *buf, size_t len, bool free_after);

/* Requests. The status of `req`'s ompi_request_t (a receive's source, tag, error, byte count,
   cancelled flag) ... */
void tigon_request_status(struct mca_mtl_request_t *req, int source, int tag, int error,
                          size_t count, bool cancelled);
/* ... or only its error (a send) ... */
void tigon_request_error(struct mca_mtl_request_t *req, int error);
/* ... then its completion callback, after which the request may be gone. */
void tigon_request_callback(struct mca_mtl_request_t *req);
/* Makes MPI_Request_free of the receive `req` (its ompi_request_t's req_free) call
   tigon_request_freeing(req) before the PML's own free function; idempotent. False when no
   hook slot is left (then nothing changed). */
bool tigon_hook_request_free(struct mca_mtl_request_t *req);
/* A probe's status. */
void tigon_status_set(struct ompi_status_public_t *st, int source, int tag, int error,
                      size_t count);

/* Matched-probe messages. */
struct ompi_message_t *tigon_message_alloc(struct ompi_communicator_t *comm, int peer,
                                           size_t count, void *req_ptr);
/* Returns the message's req_ptr and the message to Open MPI, and sets *msg to
   MPI_MESSAGE_NULL. */
void *tigon_message_take(struct ompi_message_t **msg);
void tigon_message_null(struct ompi_message_t **msg);

/* Ends this process through Open MPI's runtime (mpirun then ends the job), printing `msg`. */
void tigon_abort(int code, const char *msg);

/* A PMIx fence over every process of the job (no MPI traffic; does not call opal_progress). */
int tigon_fence(void);

/* Processes of this job on this host, this one included. */
int tigon_local_ranks(void);
/* Whether Open MPI waits by yielding the processor between polls (mpi_yield_when_idle). */
bool tigon_yield_when_idle(void);

/* Progress. */
int tigon_progress_register(int (*cb)(void));
int tigon_progress_unregister(int (*cb)(void));
void tigon_opal_progress(void);

#endif
