"""Stand-ins for a Kubernetes cluster: kmock's API emulator over HTTP and a test-side kubelet."""
