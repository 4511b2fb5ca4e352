package telegram

import (
	"strings"

	"connector/platform"
)

// This file applies the relevance policies gateways declare at boot (POST
// /relay/policy, platform.RelevanceTaker) to the group gate. A declared
// policy replaces three of the tenant's configured knobs (TenantConfig)
// and keeps the others:
//
//   - requireAddress is require_mention;
//   - freeResponseScopes are free_response_chats ("<chat id>") and
//     free_response_topics ("<chat id>:<thread id>"), each compared as
//     written; an entry that is neither could never match and is skipped
//     (the declaration is fail-soft);
//   - allowOtherBots is the negation of bots_require_mention: without it,
//     another bot's group message needs an explicit mention of this bot
//     (Telegram's nearest knob: the Bot API shows a bot other bots'
//     messages only in a few cases, and the native adapter has no
//     allow_bots).

// SetRelevance implements platform.RelevanceTaker: byTenant replaces every
// declared policy; a tenant absent from it has its configured policy.
func (p *Platform) SetRelevance(byTenant map[string]platform.Relevance) {
	policies := make(map[string]*policy, len(p.cfg.Tenants)+len(byTenant))
	for tenant, tc := range p.cfg.Tenants {
		policies[tenant], _ = newPolicy(tc) // Validate checked it
	}
	for tenant, r := range byTenant {
		tc := p.cfg.Tenants[tenant]
		require, botsMention := r.RequireAddress, !r.AllowOtherBots
		tc.RequireMention, tc.BotsRequireMention = &require, &botsMention
		tc.FreeResponseChats, tc.FreeResponseTopics = nil, nil
		skipped := 0
		for _, scope := range r.FreeResponseScopes {
			switch {
			case !strings.Contains(scope, ":"):
				if _, err := parseChatID(scope); err == nil {
					tc.FreeResponseChats = append(tc.FreeResponseChats, scope)
					continue
				}
			default:
				if _, err := freeTopic(scope); err == nil {
					tc.FreeResponseTopics = append(tc.FreeResponseTopics, scope)
					continue
				}
			}
			skipped++
		}
		// Cannot fail: Validate checked the configured knobs, the loop above
		// the declared ones.
		policies[tenant], _ = newPolicy(tc)
		if skipped > 0 {
			p.log.Info("telegram declared relevance: free-response scopes that are no chat id or chat:thread skipped",
				"tenant", tenant, "skipped", skipped)
		}
	}
	p.policies.Store(&policies)
}
