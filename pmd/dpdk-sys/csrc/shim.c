/* Non-inline exports of DPDK's static-inline fast path, so Rust can call them. Built with
 * DPDK's own cflags (-march=corei7 is required by rte_memcpy.h). */
#include "wrapper.h"

int tigon_errno(void) { return rte_errno; }
void tigon_set_errno(int e) { rte_errno = e; }
unsigned tigon_lcore_id(void) { return rte_lcore_id(); }

uint16_t tigon_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t tigon_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_mbuf *tigon_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }
int tigon_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}
void tigon_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
void tigon_pktmbuf_free_seg(struct rte_mbuf *m) { rte_pktmbuf_free_seg(m); }
char *tigon_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *tigon_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *tigon_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int tigon_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
int tigon_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail)
{
	return rte_pktmbuf_chain(head, tail);
}
uint16_t tigon_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t tigon_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
void *tigon_pktmbuf_mtod(const struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }
rte_iova_t tigon_pktmbuf_data_iova(const struct rte_mbuf *m) { return rte_pktmbuf_iova(m); }
uint16_t tigon_mbuf_refcnt_read(const struct rte_mbuf *m) { return rte_mbuf_refcnt_read(m); }
uint16_t tigon_mbuf_refcnt_update(struct rte_mbuf *m, int16_t v)
{
	return rte_mbuf_refcnt_update(m, v);
}
void tigon_pktmbuf_refcnt_update(struct rte_mbuf *m, int16_t v) { rte_pktmbuf_refcnt_update(m, v); }
uint64_t tigon_mbuf_ol_flags(const struct rte_mbuf *m) { return m->ol_flags; }
void tigon_mbuf_tx_ipv4_udp_cksum(struct rte_mbuf *m, int ip_cksum, int udp_cksum)
{
	m->l2_len = RTE_ETHER_HDR_LEN;
	m->l3_len = sizeof(struct rte_ipv4_hdr);
	m->ol_flags |= RTE_MBUF_F_TX_IPV4;
	if (ip_cksum)
		m->ol_flags |= RTE_MBUF_F_TX_IP_CKSUM;
	if (udp_cksum)
		m->ol_flags |= RTE_MBUF_F_TX_UDP_CKSUM;
}
void tigon_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr, rte_iova_t buf_iova,
				 uint16_t buf_len, struct rte_mbuf_ext_shared_info *shinfo)
{
	rte_pktmbuf_attach_extbuf(m, buf_addr, buf_iova, buf_len, shinfo);
}
struct rte_mbuf_ext_shared_info *tigon_pktmbuf_ext_shinfo_init_helper(
	void *buf_addr, uint16_t *buf_len, rte_mbuf_extbuf_free_callback_t free_cb, void *fcb_opaque)
{
	return rte_pktmbuf_ext_shinfo_init_helper(buf_addr, buf_len, free_cb, fcb_opaque);
}
void tigon_mbuf_ext_refcnt_set(struct rte_mbuf_ext_shared_info *shinfo, uint16_t v)
{
	rte_mbuf_ext_refcnt_set(shinfo, v);
}
uint16_t tigon_mbuf_ext_refcnt_read(const struct rte_mbuf_ext_shared_info *shinfo)
{
	return rte_mbuf_ext_refcnt_read(shinfo);
}
int tigon_mbuf_ext_attached(const struct rte_mbuf *m)
{
	return RTE_MBUF_HAS_EXTBUF(m) && !RTE_MBUF_HAS_PINNED_EXTBUF(m);
}
int tigon_pktmbuf_attach_extbuf_inplace(struct rte_mbuf *m, void *buf_addr, rte_iova_t buf_iova,
					uint16_t buf_len, rte_mbuf_extbuf_free_callback_t free_cb,
					void *fcb_opaque)
{
	/* rte_pktmbuf_free calls free_cb (refcount 1 -> 0) before rte_pktmbuf_detach gives m
	 * its own buffer back: the shared info is read only while m is still attached. */
	struct rte_mbuf_ext_shared_info *shinfo =
		RTE_PTR_ALIGN_CEIL(m->buf_addr, _Alignof(struct rte_mbuf_ext_shared_info));
	if (RTE_PTR_DIFF(shinfo, m->buf_addr) + sizeof(*shinfo) > m->buf_len)
		return -1;
	shinfo->free_cb = free_cb;
	shinfo->fcb_opaque = fcb_opaque;
	rte_mbuf_ext_refcnt_set(shinfo, 1);
	rte_pktmbuf_attach_extbuf(m, buf_addr, buf_iova, buf_len, shinfo);
	return 0;
}
unsigned tigon_mempool_avail_count(const struct rte_mempool *mp) { return rte_mempool_avail_count(mp); }
unsigned tigon_mempool_in_use_count(const struct rte_mempool *mp)
{
	return rte_mempool_in_use_count(mp);
}
uint16_t tigon_pktmbuf_data_room_size(struct rte_mempool *mp) { return rte_pktmbuf_data_room_size(mp); }

int tigon_dma_copy(int16_t dev_id, uint16_t vchan, rte_iova_t src, rte_iova_t dst,
		   uint32_t length, uint64_t flags)
{
	return rte_dma_copy(dev_id, vchan, src, dst, length, flags);
}
int tigon_dma_submit(int16_t dev_id, uint16_t vchan) { return rte_dma_submit(dev_id, vchan); }
uint16_t tigon_dma_completed(int16_t dev_id, uint16_t vchan, uint16_t nb_cpls,
			     uint16_t *last_idx, bool *has_error)
{
	return rte_dma_completed(dev_id, vchan, nb_cpls, last_idx, has_error);
}
uint16_t tigon_dma_completed_status(int16_t dev_id, uint16_t vchan, uint16_t nb_cpls,
				    uint16_t *last_idx, enum rte_dma_status_code *status)
{
	return rte_dma_completed_status(dev_id, vchan, nb_cpls, last_idx, status);
}
uint16_t tigon_dma_burst_capacity(int16_t dev_id, uint16_t vchan)
{
	return rte_dma_burst_capacity(dev_id, vchan);
}
