/*
 * Forwarders for Open MPI 4.1's static inline functions and macros (see shim.h). Built with
 * -mcx16 (Open MPI's headers inline 16-byte compare-and-swap) and linked into the component
 * with -Wl,--no-undefined against libmpi, libopen-rte and libopen-pal.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ompi_config.h"
#include "mpi.h"
#include "ompi/mca/mtl/mtl.h"
#include "ompi/mca/mtl/base/base.h"
#include "ompi/mca/mtl/base/mtl_base_datatype.h"
#include "ompi/communicator/communicator.h"
#include "ompi/proc/proc.h"
#include "ompi/message/message.h"
#include "ompi/request/request.h"
#include "ompi/mca/rte/rte.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "opal/util/show_help.h"
#include "opal/util/proc.h"

#include "shim.h"

/* Defined in Rust (src/component.rs) with the layout of mca_mtl_base_component_2_0_0_t. */
extern mca_mtl_base_component_2_0_0_t mca_mtl_tigon_component;
/* Defined in Rust (src/request.rs): the program frees `req`, which may still be active. */
extern void tigon_request_freeing(struct mca_mtl_request_t *req);

static struct tigon_params params = {
    .priority = "30",
    .verbose = "0",
    .socket = "",
    .eager_limit = 0,
    .channel_threshold = "0",
    .finalize_timeout_ms = "30000",
    .nap_after_us = "1000",
    .spin_after_send_ns = "600",
};
static int output = -1;

const struct tigon_params *tigon_params(void) { return &params; }
void tigon_set_eager_limit(int bytes) { params.eager_limit = bytes; }

/* A number, registered as a string: the component parses and range-checks it (an int
   variable would take "abc" as 0 silently). */
static void reg_num(const char *name, const char *desc, int level, const char **storage)
{
    (void) mca_base_component_var_register(&mca_mtl_tigon_component.mtl_version, name, desc,
                                           MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, level,
                                           MCA_BASE_VAR_SCOPE_READONLY, (void *) storage);
}

int tigon_register_params(void)
{
    reg_num("priority",
            "Priority of the tigon MTL component (the cm PML takes it over ob1's 20 when the "
            "node agent is reachable), 0 to 100",
            OPAL_INFO_LVL_9, &params.priority);
    reg_num("verbose", "Verbosity of the tigon MTL, 0 to 100 (0: errors only, 1: why it "
            "declines, 10: every endpoint, 100: every operation)", OPAL_INFO_LVL_9,
            &params.verbose);
    (void) mca_base_component_var_register(
        &mca_mtl_tigon_component.mtl_version, "socket",
        "Control socket of the node's tigon agent (empty: $TIGON_SOCKET, else "
        "/run/tigon/agent.sock)",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_3, MCA_BASE_VAR_SCOPE_READONLY,
        (void *) &params.socket);
    (void) mca_base_component_var_register(
        &mca_mtl_tigon_component.mtl_version, "eager_limit",
        "Messages up to this many bytes go eagerly, longer ones by rendezvous. Informational: "
        "the agent decides (tigon agent --rndv-threshold); set to its value when the MTL starts",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, MCA_BASE_VAR_FLAG_DEFAULT_ONLY, OPAL_INFO_LVL_4,
        MCA_BASE_VAR_SCOPE_CONSTANT, &params.eager_limit);
    reg_num("channel_threshold",
            "Messages up to this many bytes are copied through the shared-memory channel; longer "
            "ones are read and written by the agent in place, 0 to 1073741824 (0: the "
            "channel's buffer size)",
            OPAL_INFO_LVL_5, &params.channel_threshold);
    reg_num("finalize_timeout_ms",
            "How long MPI_Finalize waits for sends still in flight, 0 to 3600000 (milliseconds)",
            OPAL_INFO_LVL_9, &params.finalize_timeout_ms);
    reg_num("nap_after_us",
            "A rank waiting on tigon polls its completions, yielding the processor between "
            "polls where Open MPI asks for it (mpi_yield_when_idle, on by default when "
            "oversubscribed); once nothing has happened for this many microseconds it sleeps on "
            "the channel until the agent queues a completion (the agent wakes it in about 2 us), "
            "0 to 1000000; -1: never sleep",
            OPAL_INFO_LVL_5, &params.nap_after_us);
    reg_num("spin_after_send_ns",
            "Where ranks yield the processor while they wait (mpi_yield_when_idle) and at most "
            "two ranks share a processor, a rank that sent a message to a process of this host "
            "polls this many nanoseconds after the send before it yields: the agent's time to "
            "deliver it. Yielding sooner hands the "
            "processor to a receiver whose message is not there yet, which yields it back (two "
            "context switches, ~1.1 us on a 2-vCPU VM, for nothing), 0 to 100000 (0: yield at "
            "once)",
            OPAL_INFO_LVL_5, &params.spin_after_send_ns);
    return OMPI_SUCCESS;
}

void tigon_output_open(int verbose)
{
    if (output < 0) {
        output = opal_output_open(NULL);
        opal_output_set_verbosity(output, verbose);
    }
}

void tigon_output_close(void)
{
    if (output >= 0) {
        opal_output_close(output);
        output = -1;
    }
}

void tigon_output(int level, const char *msg)
{
    if (level <= 0) {
        opal_output(0, "%s", msg);
    } else if (output >= 0) {
        opal_output_verbose(level, output, "%s", msg);
    }
}

/* The directory of this component's .so, where help-mtl-tigon.txt is installed. */
static const char *component_dir(void)
{
    static char dir[PATH_MAX];
    static int done = 0;
    if (!done) {
        Dl_info info;
        done = 1;
        dir[0] = '\0';
        if (dladdr((void *) &mca_mtl_tigon_component, &info) && info.dli_fname) {
            char path[PATH_MAX];
            strncpy(path, info.dli_fname, sizeof(path) - 1);
            path[sizeof(path) - 1] = '\0';
            strncpy(dir, dirname(path), sizeof(dir) - 1);
            dir[sizeof(dir) - 1] = '\0';
        }
    }
    return dir;
}

void tigon_show_help(const char *topic, const char *fallback, const char *a1, const char *a2)
{
    static int added = 0;
    const char *dir = component_dir();
    char file[PATH_MAX];
    snprintf(file, sizeof(file), "%s/help-mtl-tigon.txt", dir);
    if (dir[0] != '\0' && access(file, R_OK) == 0) {
        if (!added) {
            opal_show_help_add_dir(dir);
            added = 1;
        }
        opal_show_help("help-mtl-tigon.txt", topic, true, a1 ? a1 : "", a2 ? a2 : "");
    } else {
        opal_output(0, "%s", fallback);
    }
}

/* Whether `list` (an MCA selection such as "tigon,ofi" or "^ofi") includes `name`. */
static bool selects(const char *list, const char *name)
{
    if (NULL == list || '\0' == list[0] || '^' == list[0]) {
        return false;
    }
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t) (end - p) : strlen(p);
        if (len == n && 0 == strncmp(p, name, n)) {
            return true;
        }
        if (!end) {
            break;
        }
        p = end + 1;
    }
    return false;
}

static const char *framework_selection(const char *framework)
{
    int idx = mca_base_var_find("ompi", framework, NULL, NULL);
    if (idx >= 0) {
        char **value = NULL;
        if (OPAL_SUCCESS == mca_base_var_get_value(idx, &value, NULL, NULL) && value && *value) {
            return *value;
        }
    }
    char env[64];
    snprintf(env, sizeof(env), "OMPI_MCA_%s", framework);
    return getenv(env);
}

bool tigon_mtl_requested(void) { return selects(framework_selection("mtl"), "tigon"); }
bool tigon_pml_cm_requested(void) { return selects(framework_selection("pml"), "cm"); }

int tigon_world_rank(void)
{
    if (NULL == ompi_proc_local_proc) {
        return -1;
    }
    return (int) ompi_proc_local_proc->super.proc_name.vpid;
}

const char *tigon_hostname(void)
{
    return opal_process_info.nodename ? opal_process_info.nodename : "(unknown host)";
}

int tigon_modex_send(const void *data, size_t size)
{
    int rc;
    OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &mca_mtl_tigon_component.mtl_version, data, size);
    return rc;
}

int tigon_modex_recv(struct ompi_proc_t *proc, void **data, size_t *size)
{
    int rc;
    *data = NULL;
    *size = 0;
    OPAL_MODEX_RECV(rc, &mca_mtl_tigon_component.mtl_version, &proc->super.proc_name, data,
                    size);
    return rc;
}

uint32_t tigon_comm_cid(const struct ompi_communicator_t *comm) { return comm->c_contextid; }
int tigon_comm_rank(const struct ompi_communicator_t *comm)
{
    return ompi_comm_rank((ompi_communicator_t *) comm);
}
int tigon_comm_remote_size(const struct ompi_communicator_t *comm)
{
    return ompi_comm_remote_size((ompi_communicator_t *) comm);
}
struct ompi_proc_t *tigon_comm_peer(struct ompi_communicator_t *comm, int rank)
{
    return ompi_comm_peer_lookup(comm, rank);
}
void *tigon_proc_endpoint(const struct ompi_proc_t *proc)
{
    return proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
}
void tigon_proc_set_endpoint(struct ompi_proc_t *proc, void *endpoint)
{
    proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL] = endpoint;
}
const char *tigon_proc_name(const struct ompi_proc_t *proc)
{
    return OMPI_NAME_PRINT(&proc->super.proc_name);
}
int tigon_proc_on_this_host(const struct ompi_proc_t *proc)
{
    return OPAL_PROC_ON_LOCAL_NODE(proc->super.proc_flags) ? 1 : 0;
}
const char *tigon_proc_host(const struct ompi_proc_t *proc)
{
    return proc->super.proc_hostname ? proc->super.proc_hostname : "(unknown host)";
}

int tigon_pack(struct opal_convertor_t *conv, void **buf, size_t *len, bool *free_after)
{
    /* Open MPI 4.1.4's ompi_mtl_datatype_pack hands back pBaseBuf for a contiguous datatype.
     * That is the data only where pml/cm built the convertor itself with pBaseBuf = buf +
     * true_lb (its thin and blocking sends). A convertor opal prepared for a send (pml/cm's
     * heavy requests: persistent and buffered sends) keeps pBaseBuf = buf, and the data
     * starts true_lb further on: with MPI_BOTTOM and a type at absolute addresses (what
     * MPI_Alltoallw's persistent requests carry) the MTL was given NULL and sent nothing
     * (mpi4py's testAlltoallwBottom). Such a convertor is marked CONVERTOR_SEND; its data is
     * where opal_convertor_get_current_pointer says (as later Open MPI computes it here). */
    if ((conv->flags & CONVERTOR_SEND) && NULL != conv->pDesc &&
        !(conv->flags & CONVERTOR_COMPLETED) &&
        opal_datatype_is_contiguous_memory_layout(conv->pDesc, conv->count)) {
        *free_after = false;
        *len = conv->local_size - conv->bConverted;
        *buf = conv->pBaseBuf + conv->bConverted + conv->pDesc->true_lb;
        return OMPI_SUCCESS;
    }
    return ompi_mtl_datatype_pack(conv, buf, len, free_after);
}

int tigon_recv_buf(struct opal_convertor_t *conv, void **buf, size_t *len, bool *free_after)
{
    return ompi_mtl_datatype_recv_buf(conv, buf, len, free_after);
}

int tigon_unpack(struct opal_convertor_t *conv, void *buf, size_t len, bool free_after)
{
    if (!free_after) {
        return OMPI_SUCCESS; /* the data landed in the user's buffer */
    }
    if (len > 0) {
        return ompi_mtl_datatype_unpack(conv, buf, len); /* frees buf */
    }
    free(buf);
    return OMPI_SUCCESS;
}

void tigon_request_status(struct mca_mtl_request_t *req, int source, int tag, int error,
                          size_t count, bool cancelled)
{
    ompi_status_public_t *st = &req->ompi_req->req_status;
    st->MPI_SOURCE = source;
    st->MPI_TAG = tag;
    st->MPI_ERROR = error;
    st->_ucount = count;
    st->_cancelled = cancelled;
}

void tigon_request_error(struct mca_mtl_request_t *req, int error)
{
    req->ompi_req->req_status.MPI_ERROR = error;
}

void tigon_request_callback(struct mca_mtl_request_t *req) { req->completion_callback(req); }

/*
 * MPI_Request_free of an active receive. The cm PML frees a request through its
 * ompi_request_t's req_free, without telling the MTL, and returns the request to its free list
 * only once the MTL completes it; but the program may reuse the receive buffer at once. The
 * hook lets the MTL hear of the free first (it then makes sure nothing writes that buffer any
 * more). A function pointer carries no context, so each (PML free function, offset of the MTL
 * request in the PML request) pair gets one of a few fixed hook functions; pml cm has two such
 * pairs (thin receive requests, and heavy ones for persistent receives, which share the free
 * function).
 */
#define TIGON_FREE_HOOKS 4
/* pml cm's request structs end with the MTL request a few hundred bytes in. */
#define TIGON_MAX_MTL_OFFSET 4096
typedef int (*tigon_free_fn)(ompi_request_t **);
static struct {
    tigon_free_fn orig;
    ptrdiff_t offset;
} free_hooks[TIGON_FREE_HOOKS];
static volatile int n_free_hooks = 0;
static pthread_mutex_t free_hooks_lock = PTHREAD_MUTEX_INITIALIZER;

static int free_hook(int i, ompi_request_t **rp)
{
    tigon_request_freeing((struct mca_mtl_request_t *) ((char *) *rp + free_hooks[i].offset));
    return free_hooks[i].orig(rp);
}
static int free_hook0(ompi_request_t **rp) { return free_hook(0, rp); }
static int free_hook1(ompi_request_t **rp) { return free_hook(1, rp); }
static int free_hook2(ompi_request_t **rp) { return free_hook(2, rp); }
static int free_hook3(ompi_request_t **rp) { return free_hook(3, rp); }
static const tigon_free_fn free_hook_fns[TIGON_FREE_HOOKS] = {free_hook0, free_hook1,
                                                              free_hook2, free_hook3};

bool tigon_hook_request_free(struct mca_mtl_request_t *req)
{
    ompi_request_t *r = req->ompi_req;
    tigon_free_fn f = r->req_free;
    ptrdiff_t offset = (char *) req - (char *) r;
    if (offset < 0) {
        /* pml cm's blocking receive: its request on its own stack (fields uninitialised,
           req_free included), the MTL request in alloca'd memory below it. The program never
           holds it, so there is nothing to watch, and its stack garbage must not take a hook
           slot (it did: mpi4py's tests ran out of slots, and later receives went unwatched). */
        return true;
    }
    if (NULL == f || offset == 0 || offset > TIGON_MAX_MTL_OFFSET) {
        return false; /* not an MTL request at the end of a PML request: leave it alone */
    }
    for (int i = 0; i < TIGON_FREE_HOOKS; i++) {
        if (f == free_hook_fns[i]) {
            /* Hooked when this request object was used before, maybe with another layout:
               pml cm takes thin and heavy (persistent) receive requests from one free list
               and keeps one free function for both, with the MTL request at different
               offsets. The hook must be the one of this offset. */
            if (free_hooks[i].offset == offset) {
                return true;
            }
            f = free_hooks[i].orig;
            break;
        }
    }
    bool ok = false;
    pthread_mutex_lock(&free_hooks_lock);
    int n = n_free_hooks;
    for (int i = 0; i <= n && i < TIGON_FREE_HOOKS; i++) {
        if (i == n) {
            /* A new pair: filled before the count (and the request) publishes it. */
            free_hooks[i].orig = f;
            free_hooks[i].offset = offset;
            __atomic_store_n(&n_free_hooks, n + 1, __ATOMIC_RELEASE);
        } else if (free_hooks[i].orig != f || free_hooks[i].offset != offset) {
            continue;
        }
        r->req_free = free_hook_fns[i];
        ok = true;
        break;
    }
    pthread_mutex_unlock(&free_hooks_lock);
    return ok;
}

void tigon_status_set(struct ompi_status_public_t *st, int source, int tag, int error,
                      size_t count)
{
    /* A probe is a single-completion call: MPI leaves the caller's MPI_ERROR alone (only
       multiple-completion calls set it, with MPI_ERR_IN_STATUS), as ob1 does. The outcome
       is the call's return code. */
    (void) error;
    st->MPI_SOURCE = source;
    st->MPI_TAG = tag;
    st->_ucount = count;
    st->_cancelled = 0;
}

struct ompi_message_t *tigon_message_alloc(struct ompi_communicator_t *comm, int peer,
                                           size_t count, void *req_ptr)
{
    ompi_message_t *m = ompi_message_alloc();
    if (NULL == m) {
        return NULL;
    }
    m->comm = comm;
    m->peer = peer;
    m->count = count;
    m->req_ptr = req_ptr;
    return m;
}

void *tigon_message_take(struct ompi_message_t **msg)
{
    void *p = (*msg)->req_ptr;
    ompi_message_return(*msg);
    *msg = MPI_MESSAGE_NULL;
    return p;
}

void tigon_message_null(struct ompi_message_t **msg) { *msg = MPI_MESSAGE_NULL; }

void tigon_abort(int code, const char *msg) { ompi_rte_abort(code, "%s", msg); }

int tigon_fence(void)
{
    if (NULL == opal_pmix.fence) {
        return OMPI_ERR_NOT_SUPPORTED;
    }
    return opal_pmix.fence(NULL, 0);
}

/* libmpi exports it (ompi/runtime/ompi_mpi_init.c) but the installed headers do not declare it. */
extern bool ompi_mpi_yield_when_idle;

int tigon_local_ranks(void)
{
    /* Set by the runtime's init, before the PML (and so this MTL) is selected. */
    return opal_process_info.num_local_peers + 1;
}

bool tigon_yield_when_idle(void)
{
    /* Read at MTL init: ompi_mpi_init has the MCA value (set when oversubscribed) and applies
       it to opal_progress after the PML is selected. */
    return ompi_mpi_yield_when_idle || opal_progress_yield_when_idle;
}

int tigon_progress_register(int (*cb)(void)) { return opal_progress_register(cb); }
int tigon_progress_unregister(int (*cb)(void)) { return opal_progress_unregister(cb); }
void tigon_opal_progress(void) { opal_progress(); }
