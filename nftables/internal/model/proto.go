package model

import v1 "k8s.io/api/core/v1"

// ProtoNumber is the IP protocol number of a Service protocol.
func ProtoNumber(p v1.Protocol) uint8 {
	switch p {
	case v1.ProtocolUDP:
		return 17
	case v1.ProtocolSCTP:
		return 132
	}
	return 6
}

// ProtoName is the nft name of a protocol number of ProtoNumber.
func ProtoName(p uint8) string {
	switch p {
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return "tcp"
}

// DportField is the destination port of a protocol number of ProtoNumber,
// which requires that protocol.
func DportField(p uint8) Field {
	switch p {
	case 17:
		return UDPDport
	case 132:
		return SCTPDport
	}
	return TCPDport
}
