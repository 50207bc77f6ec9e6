package nodeagent

import (
	"fmt"
	"net"
	"sync"
)

// podIPAllocator hands out loopback addresses from a /16 block, one per Pod.
// Linux routes all of 127.0.0.0/8 to lo, so each Pod can bind its own address.
type podIPAllocator struct {
	mu    sync.Mutex
	base  net.IP
	inUse map[string]bool
	next  int
}

func newPodIPAllocator(base net.IP) *podIPAllocator {
	return &podIPAllocator{base: base.To4(), inUse: map[string]bool{}, next: 2}
}

func (a *podIPAllocator) contains(ip net.IP) bool {
	ip = ip.To4()
	return ip != nil && ip[0] == a.base[0] && ip[1] == a.base[1]
}

// allocate returns preferred when it is in the block and free, otherwise the
// next free address.
func (a *podIPAllocator) allocate(preferred string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ip := net.ParseIP(preferred); ip != nil && a.contains(ip) && !a.inUse[preferred] {
		a.inUse[preferred] = true
		return preferred, nil
	}
	for range 65534 {
		n := a.next
		a.next++
		if a.next > 65534 {
			a.next = 2
		}
		ip := net.IPv4(a.base[0], a.base[1], byte(n>>8), byte(n)).String()
		if n&0xff == 0 || n&0xff == 255 || a.inUse[ip] {
			continue
		}
		a.inUse[ip] = true
		return ip, nil
	}
	return "", fmt.Errorf("no free Pod IP in %s/16", a.base)
}

func (a *podIPAllocator) release(ip string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.inUse, ip)
}
