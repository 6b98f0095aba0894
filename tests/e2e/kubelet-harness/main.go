// kubelet-harness runs kubelet's own device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager)
// and the topology manager's admission (policy "none", kubelet's default) outside a kubelet, so that
// the end-to-end suite can drive devshare's device plugins through the code kubelet runs:
//
//   - the registration server on <plugin-dir>/kubelet.sock (the v1beta1 Registration service the
//     plugins call), the plugin clients it dials, their ListAndWatch streams;
//   - pod admission as kubelet does it: init containers first, then the app containers, in spec
//     order; per container, each device-plugin resource of its limits (GetPreferredAllocation when
//     the plugin offers it, Allocate), and kubelet's checkpoint (<plugin-dir>/kubelet_internal_checkpoint)
//     written after each container;
//   - the container runtime options kubelet would hand each container (GetDeviceRunContainerOptions:
//     environment, mounts, device files, annotations, CDI devices);
//   - a restart: a new process reads the checkpoint back, wipes the plugin sockets as kubelet does,
//     and re-admits the pods that were running (their containers count as running, so the device
//     manager does not call the plugins for them, as after a real kubelet restart).
//
// It reads one JSON command a line on stdin and answers one JSON line on stdout each (logs go to
// stderr):
//
//	{"op": "admit", "pod": {...a v1 Pod...}}     -> {"admitted", "reason", "message", "containers": [...]}
//	{"op": "start", "uid": U, "container": C}   -> {"container": {...}}  (what a (re)started container gets)
//	{"op": "remove", "uid": U}                  -> {}                    (the pod terminated or was deleted)
//	{"op": "capacity"}                          -> {"capacity", "allocatable", "inactive"}
//	{"op": "pods"}                              -> {"pods": [{"uid", "containers": [...]}]}  (devices only)
//
// Every answer carries "ok": true, or "ok": false and "error". The pods admitted and not removed
// are kept in --state, so a restarted harness knows what was running.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	_ "unsafe" // go:linkname

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// newManagerImpl is the device manager's own constructor. The exported NewManagerImpl fixes the
// registration socket to /var/lib/kubelet/device-plugins/kubelet.sock; this one takes the path, as
// the device manager's own tests do, so that every test gets its own directory and no root is needed.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node,
	topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

type command struct {
	Op        string          `json:"op"`
	Pod       json.RawMessage `json:"pod,omitempty"`
	UID       string          `json:"uid,omitempty"`
	Container string          `json:"container,omitempty"`
}

type containerOut struct {
	Name        string              `json:"name"`
	Init        bool                `json:"init"`
	Devices     map[string][]string `json:"devices"` // resource -> device ids kubelet recorded
	Envs        map[string]string   `json:"envs"`
	Mounts      []map[string]any    `json:"mounts"`
	DeviceFiles []map[string]string `json:"deviceFiles"`
	Annotations map[string]string   `json:"annotations"`
	CDIDevices  []string            `json:"cdiDevices"`
	Error       string              `json:"error,omitempty"`
}

type sourcesReady struct{ ready atomic.Bool }

func (s *sourcesReady) AddSource(string) {}
func (s *sourcesReady) AllReady() bool   { return s.ready.Load() }

type harness struct {
	ctx    context.Context
	logger klog.Logger
	dm     *devicemanager.ManagerImpl
	topo   topologymanager.Manager
	state  string

	mu   sync.Mutex
	pods []*v1.Pod // admitted, not removed: kubelet's active pods
}

func (h *harness) activePods() []*v1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*v1.Pod(nil), h.pods...)
}

func (h *harness) save() error {
	h.mu.Lock()
	data, err := json.Marshal(map[string]any{"pods": h.pods})
	h.mu.Unlock()
	if err != nil {
		return err
	}
	tmp := h.state + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, h.state)
}

func (h *harness) load() ([]*v1.Pod, error) {
	data, err := os.ReadFile(h.state)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st struct {
		Pods []*v1.Pod `json:"pods"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %v", h.state, err)
	}
	return st.Pods, nil
}

func containerID(pod *v1.Pod, name string) string {
	return "harness://" + string(pod.UID) + "/" + name
}

// describe is what kubelet would give the container when it starts it (withOptions: the runtime
// options, which may make the device manager call Allocate again for a container it holds nothing
// for, as kubelet does at a container's start; else only the devices it holds).
func (h *harness) describe(pod *v1.Pod, c *v1.Container, init bool, withOptions bool) containerOut {
	out := containerOut{Name: c.Name, Init: init, Devices: map[string][]string{}, Envs: map[string]string{},
		Mounts: []map[string]any{}, DeviceFiles: []map[string]string{}, Annotations: map[string]string{},
		CDIDevices: []string{}}
	var opts *devicemanager.DeviceRunContainerOptions
	if withOptions {
		var err error
		opts, err = h.dm.GetDeviceRunContainerOptions(h.ctx, pod, c)
		if err != nil {
			out.Error = err.Error()
		}
	}
	if opts != nil {
		for _, e := range opts.Envs {
			out.Envs[e.Name] = e.Value
		}
		for _, m := range opts.Mounts {
			out.Mounts = append(out.Mounts, map[string]any{"containerPath": m.ContainerPath, "hostPath": m.HostPath,
				"readOnly": m.ReadOnly})
		}
		for _, d := range opts.Devices {
			out.DeviceFiles = append(out.DeviceFiles, map[string]string{"containerPath": d.PathInContainer,
				"hostPath": d.PathOnHost, "permissions": d.Permissions})
		}
		for _, a := range opts.Annotations {
			out.Annotations[a.Name] = a.Value
		}
		for _, d := range opts.CDIDevices {
			out.CDIDevices = append(out.CDIDevices, d.Name)
		}
	}
	for resource, instances := range h.dm.GetDevices(string(pod.UID), c.Name) {
		ids := make([]string, 0, len(instances))
		for id := range instances {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		out.Devices[resource] = ids
	}
	return out
}

func (h *harness) admit(pod *v1.Pod) map[string]any {
	if pod.UID == "" {
		return map[string]any{"ok": false, "error": "the pod has no metadata.uid (give the pod as the API serves it)"}
	}
	for _, p := range h.activePods() {
		if p.UID == pod.UID {
			return map[string]any{"ok": false, "error": fmt.Sprintf("pod %s is admitted already", pod.UID)}
		}
	}
	attrs := &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: h.activePods(), Operation: lifecycle.AddOperation}
	// kubelet adds the pod to its pod manager before admitting it, so it is one of the active pods
	// while its containers are allocated (the device manager frees the devices of inactive pods
	// before each container's allocation)
	h.mu.Lock()
	h.pods = append(h.pods, pod)
	h.mu.Unlock()
	res := h.topo.Admit(h.ctx, attrs)
	if !res.Admit {
		// kubelet rejects the pod (phase Failed, no longer active); its partial allocations are freed
		// at the next allocation
		h.remove(string(pod.UID))
		return map[string]any{"ok": true, "admitted": false, "reason": res.Reason, "message": res.Message}
	}
	if err := h.save(); err != nil {
		return map[string]any{"ok": false, "error": err.Error()}
	}
	containers := []containerOut{}
	for i := range pod.Spec.InitContainers {
		containers = append(containers, h.describe(pod, &pod.Spec.InitContainers[i], true, true))
	}
	for i := range pod.Spec.Containers {
		containers = append(containers, h.describe(pod, &pod.Spec.Containers[i], false, true))
	}
	return map[string]any{"ok": true, "admitted": true, "containers": containers}
}

func (h *harness) find(uid string) *v1.Pod {
	for _, p := range h.activePods() {
		if string(p.UID) == uid {
			return p
		}
	}
	return nil
}

func (h *harness) start(uid, name string) map[string]any {
	pod := h.find(uid)
	if pod == nil {
		return map[string]any{"ok": false, "error": fmt.Sprintf("no admitted pod %s", uid)}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return map[string]any{"ok": true, "container": h.describe(pod, &pod.Spec.InitContainers[i], true, true)}
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return map[string]any{"ok": true, "container": h.describe(pod, &pod.Spec.Containers[i], false, true)}
		}
	}
	return map[string]any{"ok": false, "error": fmt.Sprintf("pod %s has no container %s", uid, name)}
}

func (h *harness) remove(uid string) map[string]any {
	h.mu.Lock()
	kept := h.pods[:0]
	for _, p := range h.pods {
		if string(p.UID) != uid {
			kept = append(kept, p)
		}
	}
	h.pods = kept
	h.mu.Unlock()
	h.dm.UpdateAllocatedDevices(h.logger)
	if err := h.save(); err != nil {
		return map[string]any{"ok": false, "error": err.Error()}
	}
	return map[string]any{"ok": true}
}

func (h *harness) capacity() map[string]any {
	capacity, allocatable, inactive := h.dm.GetCapacity(h.logger)
	c, a := map[string]string{}, map[string]string{}
	for k, v := range capacity {
		c[string(k)] = v.String()
	}
	for k, v := range allocatable {
		a[string(k)] = v.String()
	}
	sort.Strings(inactive)
	return map[string]any{"ok": true, "capacity": c, "allocatable": a, "inactive": inactive}
}

func (h *harness) podsOut() map[string]any {
	out := []map[string]any{}
	for _, p := range h.activePods() {
		cs := []containerOut{}
		for i := range p.Spec.InitContainers {
			cs = append(cs, h.describe(p, &p.Spec.InitContainers[i], true, false))
		}
		for i := range p.Spec.Containers {
			cs = append(cs, h.describe(p, &p.Spec.Containers[i], false, false))
		}
		out = append(out, map[string]any{"uid": string(p.UID), "namespace": p.Namespace, "name": p.Name,
			"containers": cs})
	}
	return map[string]any{"ok": true, "pods": out}
}

func (h *harness) handle(line []byte) map[string]any {
	var cmd command
	if err := json.Unmarshal(line, &cmd); err != nil {
		return map[string]any{"ok": false, "error": "not a JSON command: " + err.Error()}
	}
	switch cmd.Op {
	case "admit":
		pod := &v1.Pod{}
		if err := json.Unmarshal(cmd.Pod, pod); err != nil {
			return map[string]any{"ok": false, "error": "pod: " + err.Error()}
		}
		return h.admit(pod)
	case "start":
		return h.start(cmd.UID, cmd.Container)
	case "remove":
		return h.remove(cmd.UID)
	case "capacity":
		return h.capacity()
	case "pods":
		return h.podsOut()
	}
	return map[string]any{"ok": false, "error": fmt.Sprintf("unknown op %q (admit, start, remove, capacity, pods)", cmd.Op)}
}

func main() {
	pluginDir := flag.String("plugin-dir", "", "kubelet's device plugin directory (kubelet.sock, the checkpoint)")
	state := flag.String("state", "", "file keeping the admitted pods across restarts (default: <plugin-dir>/../harness-state.json)")
	klog.InitFlags(nil)
	flag.Parse()
	if *pluginDir == "" {
		fmt.Fprintln(os.Stderr, "error: --plugin-dir is required")
		os.Exit(2)
	}
	dir, err := filepath.Abs(*pluginDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	if *state == "" {
		*state = filepath.Join(filepath.Dir(dir), "harness-state.json")
	}
	logger := klog.Background()
	ctx := klog.NewContext(context.Background(), logger)

	topo, err := topologymanager.NewManager(logger, nil, topologymanager.PolicyNone, topologymanager.ContainerTopologyScope, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error: topology manager:", err)
		os.Exit(1)
	}
	dm, err := newManagerImpl(logger, filepath.Join(dir, "kubelet.sock"), nil, topo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error: device manager:", err)
		os.Exit(1)
	}
	topo.AddHintProvider(logger, dm)
	h := &harness{ctx: ctx, logger: logger, dm: dm, topo: topo, state: *state}

	restored, err := h.load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	// What a restarted kubelet knows: the containers the runtime reports running (all of the pods it
	// had admitted), and the sources are not ready until it has seen its pods again.
	containers := containermap.NewContainerMap()
	running := sets.New[string]()
	for _, p := range restored {
		for _, c := range append(append([]v1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			id := containerID(p, c.Name)
			containers.Add(string(p.UID), c.Name, id)
			running.Insert(id)
		}
	}
	h.pods = restored
	ready := &sourcesReady{}
	if err := dm.Start(logger, h.activePods, ready, containers, running); err != nil {
		fmt.Fprintln(os.Stderr, "error: starting the device manager:", err)
		os.Exit(1)
	}
	readmitted := []map[string]any{}
	for _, p := range restored {
		res := topo.Admit(ctx, &lifecycle.PodAdmitAttributes{Pod: p, Operation: lifecycle.AddOperation})
		readmitted = append(readmitted, map[string]any{"uid": string(p.UID), "admitted": res.Admit,
			"reason": res.Reason, "message": res.Message})
	}
	ready.ready.Store(true)

	out := json.NewEncoder(os.Stdout)
	var outMu sync.Mutex
	emit := func(v any) {
		outMu.Lock()
		defer outMu.Unlock()
		if err := out.Encode(v); err != nil {
			logger.Error(err, "writing an answer")
		}
	}
	stop := func(code int) {
		if err := dm.Stop(logger); err != nil {
			logger.Error(err, "stopping the device manager")
		}
		os.Exit(code)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stop(0)
	}()
	emit(map[string]any{"ok": true, "ready": true, "socket": filepath.Join(dir, "kubelet.sock"),
		"checkpoint": filepath.Join(dir, "kubelet_internal_checkpoint"), "restored": readmitted})

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		emit(h.handle(line))
	}
	stop(0)
}
