// Package drivers declares the out-of-band hardware interfaces of a node
// (power, management, boot device and BMC steps) and the step declaration
// type shared by every driver and by the ramdisk's in-band steps. The
// coordinator uses it to know a driver's steps without asking anybody; the
// edge agent uses it to run them. It must never talk to the coordinator.
package drivers

import (
	"fmt"
	"sort"
	"strings"
)

// Interfaces in Ironic's tie-break order: at equal priority a step of an
// earlier interface runs first.
var interfaceRank = map[string]int{
	"vendor": 0, "power": 1, "management": 2, "firmware": 3, "deploy": 4, "bios": 5, "raid": 6,
}

// InterfaceRank returns the tie-break rank of an interface, -1 if unknown.
func InterfaceRank(iface string) int {
	if r, ok := interfaceRank[iface]; ok {
		return r
	}
	return -1
}

// Interfaces lists the known step interfaces in tie-break order.
func Interfaces() []string {
	return []string{"vendor", "power", "management", "firmware", "deploy", "bios", "raid"}
}

// ArgInfo describes one argument of a step.
type ArgInfo struct {
	Description string `json:"description"`
	Required    bool   `json:"required"`
}

// Step declares a clean or deploy step.
type Step struct {
	Interface string `json:"interface"`
	Step      string `json:"step"`
	Priority  int    `json:"priority"`
	Abortable bool   `json:"abortable"`
	// ArgsInfo maps argument name to its description, as Ironic's argsinfo.
	ArgsInfo map[string]ArgInfo `json:"argsinfo,omitempty"`
	// RequiresRamdisk is true for in-band steps, run by the ramdisk agent.
	RequiresRamdisk bool `json:"requires_ramdisk"`

	// Doc says what the step does, in a sentence or two for operators
	// (docs/steps.md); it is not part of the API.
	Doc string `json:"-"`
	// NeedsBMC says what the step needs from the node's BMC (docs/steps.md);
	// empty means: in-band steps need the BMC only to boot the ramdisk,
	// out-of-band steps the BMC's support of the step.
	NeedsBMC string `json:"-"`
	// Refused, when set, is why the step cannot run here (what is
	// missing); a manual clean that names it is refused at once with it.
	Refused string `json:"-"`
	// ArgsFrom are where the coordinator takes the step's arguments
	// from besides the step's own args, filled in the order of
	// ArgSources (coordinator/fsm's stepArgs); not part of the API.
	ArgsFrom []ArgSource `json:"-"`
}

// ArgSource names where a step's arguments come from besides its args.
type ArgSource string

// Argument sources, in the order they are filled.
const (
	// FromRescueHash: the args are the rescue password's hash, marked as
	// one (Ironic's agent_client), and nothing else.
	FromRescueHash ArgSource = "rescue_hash"
	// FromImage: instance_info's image (image_source, its checksum and
	// disk format, root_device) under the step's args, and the
	// operator's rule on md5 and sha1 checksums, never a step's.
	FromImage ArgSource = "image"
	// FromConfigDrive: the deploy's config drive (configdrive).
	FromConfigDrive ArgSource = "configdrive"
	// FromRootDevice: the root device hints of the node's properties
	// (root_device), unless the args set them.
	FromRootDevice ArgSource = "root_device"
	// FromDriverInfo: a declared argument the args leave unset is taken
	// from the node's driver_info when set there (IPA's habit:
	// agent_burnin_*, agent_erase_* live in driver_info).
	FromDriverInfo ArgSource = "driver_info"
	// FromProperties: the node's properties the step checks
	// (ArgNodeProperties: root_device and VerifiedProperties).
	FromProperties ArgSource = "node_properties"
	// FromTargetRAID: the node's target_raid_config (ArgTargetRaidConfig).
	FromTargetRAID ArgSource = "target_raid_config"
	// FromBurninPair: the network burn-in pairing the coordinator
	// derives for the node and its partner.
	FromBurninPair ArgSource = "burnin_pair"
	// FromSecureBoot: secure_boot true (protocol.ArgSecureBoot) when the
	// node asks to boot with UEFI Secure Boot (Ironic's capability
	// secure_boot:true): the step turns it on for the instance's boot, as
	// Ironic's prepare_instance does (configure_secure_boot_if_needed).
	FromSecureBoot ArgSource = "secure_boot"
	// FromPowerPolicy: the node's disable_power_off, as
	// protocol.ArgDisablePowerOff true when set (nothing otherwise).
	FromPowerPolicy ArgSource = "disable_power_off"
)

// ArgSources are the argument sources in the order they are filled.
var ArgSources = []ArgSource{FromRescueHash, FromImage, FromConfigDrive, FromRootDevice, FromDriverInfo, FromProperties, FromTargetRAID, FromBurninPair, FromSecureBoot, FromPowerPolicy}

// InbandRescueSteps are the steps of the rescue ramdisk's setup, which
// the rescue plan runs (they are in no step list).
func InbandRescueSteps() []Step {
	return []Step{{Interface: "rescue", Step: "finalize_rescue", Priority: 0, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromRescueHash}}}
}

// Name is "interface.step", the way operators and logs name a step.
func (s Step) Name() string { return s.Interface + "." + s.Step }

// Sort orders steps for execution: priority descending, then interface rank.
func Sort(steps []Step) {
	sort.SliceStable(steps, func(i, j int) bool {
		if steps[i].Priority != steps[j].Priority {
			return steps[i].Priority > steps[j].Priority
		}
		return InterfaceRank(steps[i].Interface) < InterfaceRank(steps[j].Interface)
	})
}

// CheckSet is the load-time check of a set of step declarations: known
// interfaces, and no two steps of one interface with the same non-zero
// priority (their order would be undefined).
func CheckSet(steps []Step) error {
	seen := map[string]string{}
	names := map[string]bool{}
	for _, s := range steps {
		if InterfaceRank(s.Interface) < 0 {
			return fmt.Errorf("step %s has unknown interface %q; known: %s", s.Name(), s.Interface, strings.Join(Interfaces(), ", "))
		}
		if s.Step == "" {
			return fmt.Errorf("a step of interface %q has no name", s.Interface)
		}
		if names[s.Name()] {
			return fmt.Errorf("step %s is declared twice", s.Name())
		}
		names[s.Name()] = true
		if s.Priority < 0 {
			return fmt.Errorf("step %s has negative priority %d", s.Name(), s.Priority)
		}
		if s.Priority == 0 {
			continue
		}
		key := fmt.Sprintf("%s/%d", s.Interface, s.Priority)
		if other, ok := seen[key]; ok {
			return fmt.Errorf("steps %s and %s of interface %s share priority %d; give one a different priority", other, s.Name(), s.Interface, s.Priority)
		}
		seen[key] = s.Name()
	}
	return nil
}

// Find returns the declared step with this interface and name.
func Find(steps []Step, iface, name string) (Step, bool) {
	for _, s := range steps {
		if s.Interface == iface && s.Step == name {
			return s, true
		}
	}
	return Step{}, false
}

// CheckArgs validates the arguments given for a declared step: every
// required argument present, no unknown argument.
func CheckArgs(decl Step, args map[string]any) error {
	for name, info := range decl.ArgsInfo {
		if _, ok := args[name]; info.Required && !ok {
			return fmt.Errorf("step %s: required argument %q is missing (%s)", decl.Name(), name, info.Description)
		}
	}
	for name := range args {
		if _, ok := decl.ArgsInfo[name]; !ok {
			known := make([]string, 0, len(decl.ArgsInfo))
			for k := range decl.ArgsInfo {
				known = append(known, k)
			}
			sort.Strings(known)
			if len(known) == 0 {
				return fmt.Errorf("step %s: unknown argument %q; this step takes no arguments", decl.Name(), name)
			}
			return fmt.Errorf("step %s: unknown argument %q; it takes %s", decl.Name(), name, strings.Join(known, ", "))
		}
	}
	return nil
}

// Argument names of the in-band steps. They are IPA's driver_info names:
// the coordinator fills a step's declared arguments that the clean step
// does not set from the node's driver_info (see fsm), so an operator can
// set them per node as with IPA, or per clean step.
const (
	ArgBurninCPUTimeout          = "agent_burnin_cpu_timeout"
	ArgBurninCPUWorkers          = "agent_burnin_cpu_cpu"
	ArgBurninVMTimeout           = "agent_burnin_vm_timeout"
	ArgBurninVMWorkers           = "agent_burnin_vm_vm"
	ArgBurninVMBytes             = "agent_burnin_vm_vm-bytes"
	ArgBurninDiskRuntime         = "agent_burnin_fio_disk_runtime"
	ArgBurninDiskLoops           = "agent_burnin_fio_disk_loops"
	ArgBurninNetworkRuntime      = "agent_burnin_fio_network_runtime"
	ArgBurninNetworkConfig       = "agent_burnin_fio_network_config"
	ArgEraseSkipReadOnly         = "agent_erase_skip_read_only"
	ArgEraseSkipRemovable        = "agent_erase_skip_removable"
	ArgContinueIfSecureEraseFail = "agent_continue_if_secure_erase_failed"
	ArgEnableNVMeSecureErase     = "agent_enable_nvme_secure_erase"
	ArgEnableATASecureErase      = "agent_enable_ata_secure_erase"
	// ArgNodeProperties is set by the coordinator, never by the operator:
	// the node's properties that deploy.verify_hardware checks.
	ArgNodeProperties = "node_properties"
)

// VerifiedProperties are the node.properties deploy.verify_hardware checks.
var VerifiedProperties = []string{"cpus", "memory_mb", "local_gb", "cpu_arch"}

// ArgMemoryTolerance is verify_hardware's tolerance for memory_mb.
const ArgMemoryTolerance = "memory_tolerance_percent"

var eraseDeviceArgs = map[string]ArgInfo{
	ArgEraseSkipReadOnly:         {Description: "true: skip read-only devices (said in the result) instead of failing the step, as IPA's driver_internal_info flag; default false"},
	ArgEraseSkipRemovable:        {Description: "true: skip removable devices that are not virtual media (said in the result) instead of failing the step; default false (not an IPA flag: IPA erases them)"},
	ArgContinueIfSecureEraseFail: {Description: "true: when a hardware erase (NVMe Format, ATA Security Erase) fails, fall back to overwriting the device; default false (the step fails)"},
	ArgEnableNVMeSecureErase:     {Description: "false: do not use NVMe Format on NVMe devices; default true"},
	ArgEnableATASecureErase:      {Description: "false: do not use ATA Security Erase on ATA devices; default true"},
}

// inbandMoreCleanSteps are the standard ramdisk's manual clean steps
// (priority 0) besides erase and inspection: burn-in, express erase,
// pstore, hardware verification.
func inbandMoreCleanSteps() []Step {
	return []Step{
		{Interface: "deploy", Step: "erase_devices_express", Priority: 0, Abortable: true, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo},
			ArgsInfo: map[string]ArgInfo{
				ArgContinueIfSecureEraseFail: {Description: "true: a device with no hardware erase (or whose hardware erase fails) gets its metadata erased instead (IPA's express fallback); default false: the step fails naming the device"},
				ArgEnableNVMeSecureErase:     eraseDeviceArgs[ArgEnableNVMeSecureErase],
				ArgEnableATASecureErase:      eraseDeviceArgs[ArgEnableATASecureErase],
			},
			Doc: "Hardware erase only: NVMe Format NVM with a cryptographic or user-data secure erase, ATA Security Erase (the normal erase, which writes zeros, so that the read-back check holds) where the drive supports it. " +
				"A device with neither fails the step naming it and the fallback argument. Read-only devices, virtual media and removable devices are skipped and listed in the result, as IPA's express erase does."},
		{Interface: "deploy", Step: "erase_pstore", Priority: 0, Abortable: true, RequiresRamdisk: true,
			Doc: "Removes the kernel's persistent crash records (pstore: EFI variables, ERST, ramoops) that a previous tenant's kernel left; the result lists what was removed."},
		{Interface: "deploy", Step: "burnin_cpu", Priority: 0, Abortable: true, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo},
			ArgsInfo: map[string]ArgInfo{
				ArgBurninCPUTimeout: {Description: "seconds to run; default 86400 (24 h, IPA's); also read from driver_info"},
				ArgBurninCPUWorkers: {Description: "workers (one per CPU each); 0 (default) means one per online CPU; also read from driver_info"},
			},
			Doc: "Loads every CPU with a compute loop (SHA-256 chains recomputed and compared across workers) for the duration; a wrong result fails the step. " +
				"The result has the operations per second per worker and the errors found."},
		{Interface: "deploy", Step: "burnin_memory", Priority: 0, Abortable: true, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo},
			ArgsInfo: map[string]ArgInfo{
				ArgBurninVMTimeout: {Description: "seconds to run; default 86400 (24 h, IPA's); also read from driver_info"},
				ArgBurninVMWorkers: {Description: "workers sharing the tested memory; 0 (default) means one per online CPU; also read from driver_info"},
				ArgBurninVMBytes:   {Description: "memory to test: \"N%\" of the available memory or a size such as \"512M\" or \"2G\"; default and ceiling 90% of the available memory less 64 MiB for the ramdisk; also read from driver_info"},
			},
			Doc: "Writes patterns (address-derived, walking ones, inverted) over a bounded share of the free memory and reads them back, again and again for the duration; a mismatch fails the step naming the offset. " +
				"The result has the bytes checked, MB/s and errors found."},
		{Interface: "deploy", Step: "burnin_disk", Priority: 0, Abortable: true, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo},
			ArgsInfo: map[string]ArgInfo{
				ArgBurninDiskRuntime:  {Description: "seconds to run; 0 (default) means run agent_burnin_fio_disk_loops full passes instead; also read from driver_info"},
				ArgBurninDiskLoops:    {Description: "full write-read-verify passes over each disk when the runtime is 0; default 4; also read from driver_info"},
				ArgEraseSkipReadOnly:  {Description: "true: skip read-only devices (said in the result) instead of failing; default false"},
				ArgEraseSkipRemovable: {Description: "true: skip removable devices that are not virtual media (said in the result) instead of failing; default false"},
			},
			Doc: "Destructive: writes a checksummed pattern over each disk with O_DIRECT, reads it back and verifies it, all disks at once, for the duration or number of passes. " +
				"An I/O error or a mismatch fails the step with a last_error naming the device and offset. The result has MB/s written and read, bytes verified and errors per device."},
		{Interface: "deploy", Step: "burnin_network", Priority: 0, Abortable: true, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo, FromBurninPair},
			ArgsInfo: map[string]ArgInfo{
				ArgBurninNetworkRuntime: {Description: "seconds each direction runs; default 21600 (IPA's); also read from driver_info"},
				ArgBurninNetworkConfig: {Description: "the pairing, required: {\"role\": \"writer\"|\"reader\", \"partner\": \"HOST:PORT\", \"partner_node\": \"NODE\"}; " +
					"the writer listens on port 9000 and writes first, the reader connects to partner (the writer's address and port as this node reaches it; port 9000 when omitted) and reads first; " +
					"partner_node is the other node (name or UUID, same site), which must name this node back; also read from driver_info"},
				ArgBurninNetworkPairingTimeout: {Description: "seconds the writer waits for its reader and the reader keeps trying to reach its writer; default 900 (IPA's); also read from driver_info"},
			},
			Doc: "Network burn-in between two nodes of a site, cleaned at the same time (IPA's writer/reader pairing, Go-native instead of fio): the writer listens on port 9000, the reader connects to it, " +
				"both prove they hold the key the coordinator derived for the pair (challenge-response with fresh nonces), then the writer streams a checksummed pattern for the runtime and the direction swaps on the same connection. " +
				"A corrupted or missing block fails the step; a pairing mismatch or a partner that never answers fails it naming the partner. The result has MB/s and bytes each way, the errors and the partner."},
		{Interface: "deploy", Step: "verify_hardware", Priority: 0, Abortable: true, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo, FromProperties},
			ArgsInfo: map[string]ArgInfo{
				ArgMemoryTolerance: {Description: "how far (in percent) the memory found may be below or above properties/memory_mb; default 5 (the kernel reserves some memory)"},
			},
			Doc: "Collects the inventory and checks it against the node's properties cpus, cpu_arch, memory_mb and local_gb (the root disk, with the node's root_device hints); " +
				"a difference fails the step naming the property, the expected and the found value. Properties that are not set are not checked; none set fails the step."},
		{Interface: "raid", Step: "create_configuration", Priority: 0, Abortable: false, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo, FromTargetRAID},
			ArgsInfo: map[string]ArgInfo{
				ArgRaidCreateRoot:    {Description: "false: do not create the root volume (the logical disk with is_root_volume) of target_raid_config; default true"},
				ArgRaidCreateNonroot: {Description: "false: create only the root volume of target_raid_config; default true"},
			},
			Doc: "Software RAID (raid_interface agent, the default): builds the node's target_raid_config as Linux software RAID (controller \"software\"), as IPA does: a GPT on each holder disk (every disk, or those physical_disks names), one partition per logical disk on each, " +
				"an md array (metadata 1.2) over them per logical disk, the root volume first (/dev/md0, RAID-1), and a BIOS boot partition (2 MiB, EF02) on each holder disk before the RAID partitions. The disks must hold no partitions (run raid.delete_configuration or erase first). " +
				"A root volume needs BIOS boot mode: refused when the ramdisk runs in UEFI mode. " +
				"The result, with each array's device and members, becomes the node's raid_config; deploy.write_image then writes the image to the root array and installs the image's GRUB (grub-install --target=i386-pc, then grub-mkconfig) on each holder disk."},
		{Interface: "raid", Step: "delete_configuration", Priority: 0, Abortable: false, RequiresRamdisk: true,
			Doc: "Software RAID (raid_interface agent, the default): deletes every software RAID array: assembles what the disks hold, stops each array, zeroes the md superblock of every member (mdadm --zero-superblock) and the partition tables of the holder disks; " +
				"the node's raid_config becomes empty. The result lists the arrays stopped and the members zeroed."},
		inbandRAIDApply(),
	}
}

// inbandRAIDApply is the ramdisk's raid.apply_configuration, a clean and
// a deploy step (Ironic's AgentRAID): software RAID from its argument.
func inbandRAIDApply() Step {
	return Step{Interface: "raid", Step: "apply_configuration", Priority: 0, Abortable: false, RequiresRamdisk: true, ArgsFrom: []ArgSource{FromDriverInfo},
		ArgsInfo: map[string]ArgInfo{
			ArgRaidConfig:        {Required: true, Description: "The RAID configuration to apply: {\"logical_disks\": [...]} in target_raid_config's schema, every logical disk with \"controller\": \"software\""},
			ArgDeleteExisting:    {Description: "true (default): delete every software RAID array first, as raid.delete_configuration; false: the disks must hold no partitions"},
			ArgRaidCreateRoot:    {Description: "false: do not create the root volume (is_root_volume) of raid_config; default true"},
			ArgRaidCreateNonroot: {Description: "false: create only the root volume of raid_config; default true"},
		},
		Doc: "Software RAID (raid_interface agent, the default): raid.create_configuration with the configuration given as the raid_config argument instead of the node's target_raid_config, after raid.delete_configuration unless delete_existing is false; " +
			"the result becomes the node's raid_config. A clean and a deploy step (priority 0: it runs when a clean step list or a deploy template names it)."}
}

// Arguments of raid.create_configuration (Ironic's). The coordinator adds
// ArgTargetRaidConfig, the node's target_raid_config, never the operator.
const (
	ArgRaidCreateRoot    = "create_root_volume"
	ArgRaidCreateNonroot = "create_nonroot_volumes"
	ArgTargetRaidConfig  = "target_raid_config"
)

// standardDocs documents steps declared before Doc existed, by name.
var standardDocs = map[string]Step{
	"deploy.erase_devices_metadata": {Doc: "Zeroes the partition tables and file system signatures (start and end of each disk and partition) of every writable disk; read-only, removable and virtual media devices are skipped and listed."},
	"deploy.erase_devices": {Doc: "Erases every disk and verifies it reads back as zeros: NVMe Format or ATA Security Erase where the drive supports it (IPA's order), else discard/write-zeroes offload, else overwriting with zeros. " +
		"Virtual media are skipped; a read-only or removable device fails the step unless its skip argument is set; a failed hardware erase fails the step unless agent_continue_if_secure_erase_failed is set."},
	"deploy.inspect_hardware":      {Doc: "Collects the hardware inventory (CPUs, memory, disks, NICs) and the properties cpus, memory_mb, local_gb, cpu_arch."},
	"deploy.write_image":           {Doc: "Downloads the instance image, verifies its checksum and writes it to the root disk chosen by the root_device hints; then the deploy's config drive, if any, into the image's config-2 partition or a new one at the end of the disk (docs/deploy.md)."},
	"deploy.prepare_instance_boot": {Doc: "Sets the node to boot the written instance from its disk."},
	"deploy.tear_down_agent":       {Doc: "Powers the node off, ending the ramdisk's boot (with disable_power_off: ends the boot and leaves the power on)."},
	"deploy.boot_instance":         {Doc: "Powers the node on into the instance (with disable_power_off: reboots it into the instance)."},
	"management.reset_bmc":         {Doc: "Resets the BMC (Redfish Manager.Reset, IPMI cold reset) and waits for it to answer again.", NeedsBMC: "a BMC reset action"},
	"management.fake_reset_bmc":    {Doc: "The fake driver's stand-in for reset_bmc: waits `delay` seconds.", NeedsBMC: "nothing (fake)"},
	"bios.apply_configuration":     {Doc: "Sets BIOS settings through the BMC; they take effect at the next boot.", NeedsBMC: "Redfish Bios with a Settings resource"},
	"bios.factory_reset":           {Doc: "Resets the BIOS settings to the factory defaults through the BMC.", NeedsBMC: "Redfish Bios.ResetBios"},
	"rescue.finalize_rescue":       {Doc: "Leaves the ramdisk running for the operator."},
}

// Documented returns s with Doc and NeedsBMC filled from the standard
// documentation when the declaration leaves them empty.
func Documented(s Step) Step {
	if d, ok := standardDocs[s.Name()]; ok {
		if s.Doc == "" {
			s.Doc = d.Doc
		}
		if s.NeedsBMC == "" {
			s.NeedsBMC = d.NeedsBMC
		}
	}
	return s
}

// Standard returns the standard ramdisk's declaration of an in-band clean
// or deploy step, with its arguments and refusal.
func Standard(iface, step string) (Step, bool) {
	if s, ok := Find(InbandCleanSteps(), iface, step); ok {
		return s, true
	}
	return Find(InbandDeploySteps(), iface, step)
}
