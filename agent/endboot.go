package agent

// endBoot ends a node's ramdisk boot that no power command ended: the
// coordinator says so (end_boot) when an operation failed or was aborted
// and left the node powered on with its ramdisk. The boot's credential
// stops working at this site as it did at the coordinator: the site
// broker no longer admits it and closes the connections that used it,
// the boot's parameters image is gone from the media server, and its
// network boot is disarmed. The virtual media stays inserted until the
// next power command (ejecting needs the BMC).
func (a *Agent) endBoot(node string) {
	if node == "" {
		return
	}
	a.dropBoot(node)
	if a.media != nil {
		a.media.dropParams(node)
	}
	if st := a.netbootState(); st != nil && st.srv != nil {
		st.srv.Disarm(node)
	}
	a.log.Info("ramdisk boot ended by the coordinator: its credential no longer works at this site", "node", node)
}
