/* The DPDK surface tigon binds: bindgen reads this header, the shim implements the
 * tigon_* functions declared at the bottom (DPDK's fast path is static inline). */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_memory.h>
#include <rte_dev.h>
#include <rte_bus_vdev.h>
#include <rte_ether.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_dmadev.h>
#include <rte_alarm.h>

/* RTE_BIT64() constants are function-like macros that bindgen drops: restate them as
 * enumerators so bindgen evaluates them with clang. */
enum tigon_consts {
	TIGON_DMA_OP_FLAG_FENCE = RTE_DMA_OP_FLAG_FENCE,
	TIGON_DMA_OP_FLAG_SUBMIT = RTE_DMA_OP_FLAG_SUBMIT,
	TIGON_DMA_OP_FLAG_LLC = RTE_DMA_OP_FLAG_LLC,
	TIGON_DMA_CAPA_MEM_TO_MEM = RTE_DMA_CAPA_MEM_TO_MEM,
	TIGON_DMA_CAPA_SVA = RTE_DMA_CAPA_SVA,
	TIGON_DMA_CAPA_SILENT = RTE_DMA_CAPA_SILENT,
	TIGON_DMA_CAPA_OPS_COPY = RTE_DMA_CAPA_OPS_COPY,
	TIGON_ETH_RX_OFFLOAD_SCATTER = RTE_ETH_RX_OFFLOAD_SCATTER,
	TIGON_ETH_TX_OFFLOAD_MULTI_SEGS = RTE_ETH_TX_OFFLOAD_MULTI_SEGS,
	TIGON_ETH_TX_OFFLOAD_IPV4_CKSUM = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM,
	TIGON_ETH_TX_OFFLOAD_UDP_CKSUM = RTE_ETH_TX_OFFLOAD_UDP_CKSUM,
	TIGON_ETH_RX_OFFLOAD_IPV4_CKSUM = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM,
	TIGON_ETH_RX_OFFLOAD_UDP_CKSUM = RTE_ETH_RX_OFFLOAD_UDP_CKSUM,
	TIGON_ETH_RSS_NONFRAG_IPV4_UDP = RTE_ETH_RSS_NONFRAG_IPV4_UDP,
	TIGON_ETH_RSS_L4_SRC_ONLY = RTE_ETH_RSS_L4_SRC_ONLY,
	TIGON_MBUF_F_EXTERNAL = RTE_MBUF_F_EXTERNAL,
	TIGON_MBUF_F_INDIRECT = RTE_MBUF_F_INDIRECT,
	TIGON_BAD_IOVA = RTE_BAD_IOVA,
};

/* rte_errno is a thread-local variable. */
int tigon_errno(void);
void tigon_set_errno(int e);
unsigned tigon_lcore_id(void);

/* ethdev fast path */
uint16_t tigon_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t tigon_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);

/* mbufs */
struct rte_mbuf *tigon_pktmbuf_alloc(struct rte_mempool *mp);
int tigon_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count);
void tigon_pktmbuf_free(struct rte_mbuf *m);
void tigon_pktmbuf_free_seg(struct rte_mbuf *m);
char *tigon_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *tigon_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *tigon_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int tigon_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
int tigon_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail);
uint16_t tigon_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t tigon_pktmbuf_tailroom(const struct rte_mbuf *m);
void *tigon_pktmbuf_mtod(const struct rte_mbuf *m);
rte_iova_t tigon_pktmbuf_data_iova(const struct rte_mbuf *m);
uint16_t tigon_mbuf_refcnt_read(const struct rte_mbuf *m);
uint16_t tigon_mbuf_refcnt_update(struct rte_mbuf *m, int16_t v);
void tigon_pktmbuf_refcnt_update(struct rte_mbuf *m, int16_t v);
uint64_t tigon_mbuf_ol_flags(const struct rte_mbuf *m);
/* Asks the NIC for the IPv4 header and/or UDP checksums of an Ethernet/IPv4/UDP frame (no
 * options, no VLAN): sets l2_len, l3_len and the TX flags (the caller wrote the pseudo-header
 * sum into the UDP checksum field, as DPDK's offload convention wants). */
void tigon_mbuf_tx_ipv4_udp_cksum(struct rte_mbuf *m, int ip_cksum, int udp_cksum);
void tigon_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr, rte_iova_t buf_iova,
				 uint16_t buf_len, struct rte_mbuf_ext_shared_info *shinfo);
struct rte_mbuf_ext_shared_info *tigon_pktmbuf_ext_shinfo_init_helper(
	void *buf_addr, uint16_t *buf_len, rte_mbuf_extbuf_free_callback_t free_cb, void *fcb_opaque);
void tigon_mbuf_ext_refcnt_set(struct rte_mbuf_ext_shared_info *shinfo, uint16_t v);
uint16_t tigon_mbuf_ext_refcnt_read(const struct rte_mbuf_ext_shared_info *shinfo);
/* Whether segment `m` is attached to an external buffer someone else owns (not one of a pool
 * whose data rooms are external memory, rte_pktmbuf_pool_create_extbuf). */
int tigon_mbuf_ext_attached(const struct rte_mbuf *m);
/* Attaches direct, empty mbuf `m` to an external buffer with its shared info placed in m's own
 * data room (unused while attached, and m's until it goes back to its pool): no allocation.
 * Returns 0, or -1 when m's own room cannot hold the shared info. */
int tigon_pktmbuf_attach_extbuf_inplace(struct rte_mbuf *m, void *buf_addr, rte_iova_t buf_iova,
					uint16_t buf_len, rte_mbuf_extbuf_free_callback_t free_cb,
					void *fcb_opaque);
unsigned tigon_mempool_avail_count(const struct rte_mempool *mp);
unsigned tigon_mempool_in_use_count(const struct rte_mempool *mp);
uint16_t tigon_pktmbuf_data_room_size(struct rte_mempool *mp);

/* dmadev fast path (experimental in 22.11) */
int tigon_dma_copy(int16_t dev_id, uint16_t vchan, rte_iova_t src, rte_iova_t dst,
		   uint32_t length, uint64_t flags);
int tigon_dma_submit(int16_t dev_id, uint16_t vchan);
uint16_t tigon_dma_completed(int16_t dev_id, uint16_t vchan, uint16_t nb_cpls,
			     uint16_t *last_idx, bool *has_error);
uint16_t tigon_dma_completed_status(int16_t dev_id, uint16_t vchan, uint16_t nb_cpls,
				    uint16_t *last_idx, enum rte_dma_status_code *status);
uint16_t tigon_dma_burst_capacity(int16_t dev_id, uint16_t vchan);
