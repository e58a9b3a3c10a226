package svcproxy

// KubeProxyVersion is the kube-proxy release whose semantics this module
// tracks: the decisions (which endpoints serve which traffic, NodePort
// addresses, masquerading, rejects), the backends' rule layouts and the
// reference proxies' flags and configuration file follow it, and the
// API-server suite runs this kube-proxy beside ours
// (e2e/apiserver/tools/kubernetes pins it).
const KubeProxyVersion = "v1.37.2"
