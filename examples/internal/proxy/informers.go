package proxy

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// clientFromKubeconfig makes a clientset from a kubeconfig file.
func clientFromKubeconfig(path string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cfg.UserAgent = "svcproxy-reference-proxy"
	return kubernetes.NewForConfig(cfg)
}
